//! Prometheus metrics, on a registry of our own (no globals). No per-node
//! labels: a 10k-node site must not mean 10k series.
//!
//! `Metrics::for_site` is the one list of every metric with its help text,
//! which the metrics table of docs/guide/operations.md documents
//! (`cli/tests/dashboards.rs` checks that every family served is in it).

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Metric, Registry};

use crate::model::ConditionStatus;

mod exposition;
pub mod nodes;

pub use exposition::Exposition;
pub use nodes::{LabelsAllowlist, NodeSeries, ResourceSet};

/// A condition status as a label value: `True`, `False`, `Unknown`.
impl EncodeLabelValue for ConditionStatus {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        std::fmt::Write::write_str(encoder, self.as_str())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConditionLabels {
    pub condition: String,
    pub status: ConditionStatus,
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

/// How a `--transition-hook` run ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum HookResult {
    Succeeded,
    /// A non-zero exit, or it could not start.
    Failed,
    /// Killed at `--transition-hook-timeout`.
    TimedOut,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HookRunLabels {
    pub result: HookResult,
}

/// A source of nodes the controller follows.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum NodeSource {
    /// `--nodes-file`.
    NodesFile,
    /// `--cloud-provider` (an inventory, an endpoint, a cloud).
    Cloud,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    pub source: NodeSource,
}

/// How a scheduled backup (`--backup-dir`) ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum BackupResult {
    Succeeded,
    Failed,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BackupLabels {
    pub result: BackupResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ZoneLabels {
    /// `topology.kubernetes.io/zone`; empty for nodes without one.
    pub zone: String,
    /// The nodes' Ready status.
    pub status: ConditionStatus,
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

/// The verbs the mirror's requests are counted by.
pub const MIRROR_VERBS: [&str; 7] = [
    "get",
    "list",
    "create",
    "update",
    "patch",
    "patch_status",
    "delete",
];

/// Every metric nodekeeper exports.
pub struct Metrics {
    registry: Registry,
    /// `--site`, as `nodekeeper_build_info` says it.
    site: Option<String>,
    /// kube-state-metrics' node series (`metrics::nodes`).
    node_series: NodeSeries,
    /// Whether they are served (`--resources` names nodes, or is not given).
    node_series_served: bool,
    pub nodes: Family<ConditionLabels, Gauge>,
    pub transitions: Family<ConditionLabels, Counter>,
    pub probes: Family<ProbeLabels, Counter>,
    pub probe_duration: Histogram,
    pub sweep_duration: Histogram,
    pub store_size: Gauge,
    pub store_events: Gauge,
    pub store_writable: Gauge,
    pub store_flushes: Counter,
    pub store_flush_duration: Histogram,
    pub store_group_size: Histogram,
    pub registered: Gauge,
    pub unregistered: Gauge,
    pub heartbeats: Family<HeartbeatLabels, Counter>,
    pub heartbeat_age: Family<QuantileLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub pushing: Gauge,
    pub evictions: Counter,
    pub source_failures: Counter,
    pub source_failing: Family<SourceLabels, Gauge>,
    pub source_machines: Gauge,
    pub source_sync_duration: Histogram,
    pub mirror_backlog: Gauge,
    pub mirror_oldest_age: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub mirror_requests: Family<MirrorRequestLabels, Counter>,
    pub mirror_request_duration: Histogram,
    pub mirror_retries: Counter,
    pub mirror_lease_renewals: Counter,
    pub mirror_leader: Gauge,
    pub mirror_configured: Gauge,
    pub last_sweep: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub last_monitor_pass: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// The controller's lateness (see `controller::clock`).
    pub controller_lag: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub controller_away: Counter<f64, std::sync::atomic::AtomicU64>,
    pub http_connections: Gauge,
    pub http_connections_evicted: Counter,
    pub http_connections_stalled: Counter,
    pub http_inflight: Family<RequestKindLabels, Gauge>,
    pub http_rejected: Family<RejectedLabels, Counter>,
    /// Handles into `heartbeats` and `http_inflight`, taken once: counting
    /// thousands of requests a second needs no label lookup each time.
    /// In the order `heartbeat_counter` and `inflight_gauge` match them.
    heartbeats_by: [Counter; 2],
    inflight: [Gauge; 3],
    pub mirror_throttled: Counter,
    pub mirror_nodes_missing_upstream: Gauge,
    pub mirror_nodes_differ_upstream: Gauge,
    pub mirror_budget_qps: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub mirror_lease_qps_needed: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub mirror_budget_sufficient: Gauge,
    pub zone_nodes: Family<ZoneLabels, Gauge>,
    /// The zones `zone_nodes` has series for, so a zone that empties is dropped.
    zones: std::sync::Mutex<std::collections::BTreeSet<String>>,
    pub hook_runs: Family<HookRunLabels, Counter>,
    pub hook_duration: Histogram,
    pub hook_last_seq: Gauge,
    pub hook_pending: Gauge,
    pub hook_lag: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub backups: Family<BackupLabels, Counter>,
    pub backup_last_success: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub backup_last_seq: Gauge,
    pub backup_last_bytes: Gauge,
    pub backup_last_duration: Gauge<f64, std::sync::atomic::AtomicU64>,
    credential_file_stale: Family<CredentialFileLabels, Gauge>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CredentialFileLabels {
    /// The flag that names the file, without dashes (`token-file`, …).
    pub file: String,
}

/// Which budget an API request counts against.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum RequestKind {
    /// Watches: long-running.
    Watch,
    /// Other reads.
    Read,
    /// Writes (heartbeats among them).
    Mutating,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestKindLabels {
    pub kind: RequestKind,
}

/// Why the API refused a request before handling it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum RejectReason {
    /// Its budget was full (429).
    TooManyRequests,
    /// Its client held its share of the budget already (429).
    ClientShare,
    /// Its body did not arrive in time (408).
    BodyTimeout,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectedLabels {
    pub kind: RequestKind,
    pub reason: RejectReason,
}

impl Metrics {
    /// `nodekeeper_credential_file_stale` for the file of `flag`.
    pub fn credential_file_stale(&self, flag: &str) -> Gauge {
        self.credential_file_stale
            .get_or_create(&CredentialFileLabels { file: flag.into() })
            .clone()
    }
}

/// A wall-clock time as Unix seconds, for `*_timestamp_seconds` gauges.
pub fn unix_seconds(t: crate::model::Micros) -> f64 {
    t.0 as f64 / 1e6
}

/// The `nodekeeper_` registry, handing back each metric it registers.
struct Catalogue<'a>(&'a mut Registry);

impl Catalogue<'_> {
    /// A new metric (at 0, or a family without series) as `name`.
    fn add<M: Metric + Clone + Default>(&mut self, name: &str, help: &str) -> M {
        let metric = M::default();
        self.0.register(name, help, metric.clone());
        metric
    }

    /// A histogram as `name`, its buckets doubling from `start`.
    fn histogram(&mut self, name: &str, help: &str, start: f64, buckets: u16) -> Histogram {
        let metric = Histogram::new(exponential_buckets(start, 2.0, buckets));
        self.0.register(name, help, metric.clone());
        metric
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// The metrics of a controller without `--site`.
    pub fn new() -> Metrics {
        Metrics::for_site(None)
    }

    /// `--site`, if given.
    pub fn site(&self) -> Option<&str> {
        self.site.as_deref()
    }

    /// Registers every series; `site` (`--site`) goes into
    /// `nodekeeper_build_info` only: a site is a target label, given by
    /// the scrape configuration (docs/decisions/site-label.md). Long: it
    /// is the catalogue of metrics, one registration per family, in the
    /// order they are served.
    pub fn for_site(site: Option<&str>) -> Metrics {
        let mut root = Registry::default();
        // The standard process_* series carry no prefix; ours all do.
        root.register_collector(Box::new(crate::process::ProcessCollector));
        let mut r = Catalogue(root.sub_registry_with_prefix("nodekeeper"));
        let build = crate::version::build_info();
        r.0.register(
            "build",
            "Which nodekeeper this is: version, git commit, build date, compiler and --site (always 1)",
            prometheus_client::metrics::info::Info::new(vec![
                ("version", build.version.to_string()),
                ("git_commit", build.git_commit.to_string()),
                ("build_date", build.build_date.to_string()),
                ("rustc_version", build.rustc_version.to_string()),
                ("site", site.unwrap_or_default().to_string()),
            ]),
        );
        let mut metrics = Metrics {
            nodes: r.add("nodes", "Registered nodes by condition status"),
            transitions: r.add(
                "condition_transitions",
                "Condition changes, by the status changed to",
            ),
            probes: r.add("probes", "Kubelet health probes by result"),
            // 100µs … ~6.5s: loopback answers to timeouts.
            probe_duration: r.histogram(
                "probe_duration_seconds",
                "Kubelet health probe latency",
                0.0001,
                17,
            ),
            sweep_duration: r.histogram(
                "sweep_duration_seconds",
                "Time to probe every node once and store the results",
                0.001,
                16,
            ),
            store_size: r.add("store_size_bytes", "Size of the store on disk"),
            store_events: r.add("store_last_seq", "Sequence number of the newest durable event"),
            store_writable: r.add(
                "store_writable",
                "1 while the store takes writes; 0 while it refuses them (a disk short of space, a failed write)",
            ),
            store_flushes: r.add(
                "store_flushes",
                "Flushes of the store; each makes a group of changes durable",
            ),
            store_flush_duration: r.histogram(
                "store_flush_duration_seconds",
                "Time to make one group of changes durable",
                0.0001,
                16,
            ),
            store_group_size: r.histogram(
                "store_group_size",
                "Changes made durable by one flush (group commit)",
                1.0,
                13,
            ),
            registered: r.add("registered_nodes", "Nodes in the registry"),
            unregistered: r.add(
                "unregistered_nodes",
                "Nodes a source names that are not registered yet (registration is tried again until they are)",
            ),
            heartbeats: r.add("heartbeats", "Heartbeats accepted, by how they came"),
            heartbeat_age: r.add(
                "heartbeat_age_seconds",
                "Time since the last heartbeat of pushing nodes, over all of them (0.5, 0.99 and 1 quantiles)",
            ),
            pushing: r.add("pushing_nodes", "Nodes whose health comes from their own heartbeats"),
            evictions: r.add("evictions", "Nodes evicted (not Ready past --pod-eviction-timeout)"),
            source_failures: r.add(
                "source_list_failures",
                "Failed listings of the cloud or inventory source",
            ),
            source_failing: r.add(
                "source_failing",
                "1 while a source of nodes cannot be followed (a nodes file that does not parse or cannot be read, a failed listing), else 0; the registry is left as it is meanwhile",
            ),
            source_machines: r.add(
                "source_machines",
                "Machines in the last good listing of the source",
            ),
            source_sync_duration: r.histogram(
                "source_sync_duration_seconds",
                "Time to list the cloud or inventory source and bring the registry in line",
                0.001,
                16,
            ),
            mirror_backlog: r.add(
                "mirror_backlog",
                "Outbox entries (nodes and pod evictions) the API server has not been told yet",
            ),
            mirror_oldest_age: r.add(
                "mirror_oldest_entry_age_seconds",
                "Age of the oldest outbox entry (0 when the outbox is empty)",
            ),
            mirror_requests: r.add(
                "mirror_requests",
                "Requests to the API server, by verb and answer",
            ),
            mirror_request_duration: r.histogram(
                "mirror_request_duration_seconds",
                "API server request latency",
                0.0005,
                16,
            ),
            mirror_retries: r.add(
                "mirror_retries",
                "Outbox entries and Lease renewals that failed and were scheduled again",
            ),
            mirror_lease_renewals: r.add(
                "mirror_lease_renewals",
                "Node Leases renewed in kube-node-lease",
            ),
            mirror_leader: r.add(
                "mirror_leader",
                "1 while this controller holds the leader Lease and writes to the API server",
            ),
            mirror_configured: r.add(
                "mirror_configured",
                "1 when this controller mirrors to an API server (--kubeconfig or --master), else 0",
            ),
            last_sweep: r.add(
                "last_sweep_timestamp_seconds",
                "When the last probe sweep finished and its results were stored (Unix seconds; 0 before the first)",
            ),
            last_monitor_pass: r.add(
                "last_monitor_pass_timestamp_seconds",
                "When the last monitor pass (silence check and eviction) finished (Unix seconds; 0 before the first)",
            ),
            controller_lag: r.add(
                "controller_lag_seconds",
                "The longest the controller went without running (starved of CPU, stopped or suspended) within the last 30 seconds; 0 while it runs on time. Grace periods are extended by as much",
            ),
            controller_away: r.add(
                "controller_away_seconds",
                "Time the controller went without running, in all: what its own clock leaves out of every grace period",
            ),
            http_connections: r.add("http_connections", "API connections open"),
            http_connections_evicted: r.add(
                "http_connections_evicted",
                "Idle API connections closed to make room for new ones (the connection cap was reached)",
            ),
            http_connections_stalled: r.add(
                "http_connections_stalled",
                "API connections closed because their clients took nothing of the responses they were given for the stall timeout",
            ),
            http_inflight: r.add(
                "http_inflight_requests",
                "API requests being served, by budget (watches, other reads, writes)",
            ),
            http_rejected: r.add(
                "http_rejected_requests",
                "API requests refused before being handled: budget full (429) or body too slow (408)",
            ),
            mirror_throttled: r.add(
                "mirror_throttled",
                "API requests answered 429 Too Many Requests (API Priority and Fairness); each waits its Retry-After",
            ),
            mirror_nodes_missing_upstream: r.add(
                "mirror_nodes_missing_upstream",
                "Registry nodes the API server lacks, as last listed or watched",
            ),
            mirror_nodes_differ_upstream: r.add(
                "mirror_nodes_differ_upstream",
                "Registry nodes whose Node on the API server differs from the registry, as last listed or watched",
            ),
            mirror_budget_qps: r.add(
                "mirror_budget_qps",
                "The mirror's request budget in requests per second (--kube-api-qps, or sized from the Ready nodes)",
            ),
            mirror_lease_qps_needed: r.add(
                "mirror_lease_qps_needed",
                "Requests per second that renewing every Ready node's Lease needs",
            ),
            mirror_budget_sufficient: r.add(
                "mirror_budget_sufficient",
                "1 when the request budget renews every Ready node's Lease in time with a fifth to spare, else 0",
            ),
            zone_nodes: r.add(
                "zone_nodes",
                "Nodes by zone (topology.kubernetes.io/zone) and Ready status, as of the last monitor pass",
            ),
            hook_runs: r.add(
                "transition_hook_runs",
                "Runs of --transition-hook, by how they ended",
            ),
            hook_duration: r.histogram(
                "transition_hook_duration_seconds",
                "Time one --transition-hook run took",
                0.001,
                16,
            ),
            hook_last_seq: r.add(
                "transition_hook_last_seq",
                "Seq of the last event --transition-hook is done with (kept in the store)",
            ),
            hook_pending: r.add(
                "transition_hook_pending_events",
                "Durable events --transition-hook has not looked at yet (transitions and others)",
            ),
            hook_lag: r.add(
                "transition_hook_lag_seconds",
                "Age of the transition last handed to --transition-hook when it was handed over (0 while it has nothing to do)",
            ),
            backups: r.add("backups", "Scheduled backups (--backup-dir), by how they ended"),
            backup_last_success: r.add(
                "backup_last_success_timestamp_seconds",
                "When the last scheduled backup was written whole (Unix seconds; 0 before the first)",
            ),
            backup_last_seq: r.add(
                "backup_last_seq",
                "The seq the last scheduled backup is a snapshot of",
            ),
            backup_last_bytes: r.add("backup_last_size_bytes", "Size of the last scheduled backup"),
            backup_last_duration: r.add(
                "backup_last_duration_seconds",
                "Time the last scheduled backup took to write",
            ),
            credential_file_stale: r.add(
                "credential_file_stale",
                "1 while a credential file (--token-file, --client-ca-file, --tls-cert-file) changed on disk but cannot be read or used, so its last good copy is still in use; else 0",
            ),
            site: site.map(str::to_string),
            node_series: NodeSeries::default(),
            node_series_served: true,
            zones: std::sync::Mutex::new([String::new()].into()),
            // Set below, once the families hold their series.
            heartbeats_by: Default::default(),
            inflight: Default::default(),
            registry: root,
        };
        metrics.store_writable.set(1);
        metrics.heartbeats_by = [Via::Status, Via::Lease].map(|via| {
            metrics
                .heartbeats
                .get_or_create(&HeartbeatLabels { via })
                .clone()
        });
        metrics.inflight =
            [RequestKind::Watch, RequestKind::Read, RequestKind::Mutating].map(|kind| {
                metrics
                    .http_inflight
                    .get_or_create(&RequestKindLabels { kind })
                    .clone()
            });
        metrics.export_known_series();
        metrics
    }

    /// Counters and label values known up front are exported at 0 from the
    /// start: a rate() or an alert has a series before the first event (an
    /// empty family is not served at all).
    fn export_known_series(&self) {
        for status in ConditionStatus::ALL {
            let labels = ConditionLabels {
                condition: crate::model::READY.into(),
                status,
            };
            let _ = self.nodes.get_or_create(&labels);
            let _ = self.transitions.get_or_create(&labels);
            // The empty zone, until the first monitor pass counts the nodes.
            let zone = ZoneLabels {
                zone: String::new(),
                status,
            };
            let _ = self.zone_nodes.get_or_create(&zone);
        }
        for result in [
            ProbeResult::Healthy,
            ProbeResult::Unhealthy,
            ProbeResult::NoAnswer,
        ] {
            let _ = self.probes.get_or_create(&ProbeLabels { result });
        }
        for quantile in ["0.5", "0.99", "1"] {
            let quantile = quantile.into();
            let _ = self
                .heartbeat_age
                .get_or_create(&QuantileLabels { quantile });
        }
        for source in [NodeSource::NodesFile, NodeSource::Cloud] {
            let _ = self.source_failing.get_or_create(&SourceLabels { source });
        }
        for kind in [RequestKind::Watch, RequestKind::Read, RequestKind::Mutating] {
            for reason in [
                RejectReason::TooManyRequests,
                RejectReason::ClientShare,
                RejectReason::BodyTimeout,
            ] {
                let kind = kind.clone();
                let _ = self
                    .http_rejected
                    .get_or_create(&RejectedLabels { kind, reason });
            }
        }
        // The mirror's answered requests; other codes appear as they are met.
        for verb in MIRROR_VERBS {
            let _ = self.mirror_requests.get_or_create(&MirrorRequestLabels {
                verb: verb.to_string(),
                code: "2xx".into(),
            });
        }
        for result in [
            HookResult::Succeeded,
            HookResult::Failed,
            HookResult::TimedOut,
        ] {
            let _ = self.hook_runs.get_or_create(&HookRunLabels { result });
        }
        for result in [BackupResult::Succeeded, BackupResult::Failed] {
            let _ = self.backups.get_or_create(&BackupLabels { result });
        }
        for file in ["token-file", "client-ca-file", "tls-cert-file"] {
            let _ = self.credential_file_stale(file);
        }
    }

    /// `nodekeeper_heartbeats_total` of one kind of heartbeat.
    pub fn heartbeat_counter(&self, via: Via) -> &Counter {
        let [status, lease] = &self.heartbeats_by;
        match via {
            Via::Status => status,
            Via::Lease => lease,
        }
    }

    /// `nodekeeper_http_inflight_requests` of one budget.
    pub fn inflight_gauge(&self, kind: &RequestKind) -> &Gauge {
        let [watch, read, mutating] = &self.inflight;
        match kind {
            RequestKind::Watch => watch,
            RequestKind::Read => read,
            RequestKind::Mutating => mutating,
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

    /// Sets the per-zone node counts from every node's zone and Ready status.
    pub fn set_zone_counts<'a>(&self, nodes: impl Iterator<Item = (&'a str, ConditionStatus)>) {
        // By status, in the order of `ConditionStatus::ALL`.
        let mut counts: std::collections::BTreeMap<&str, [i64; 3]> = Default::default();
        for (zone, status) in nodes {
            counts.entry(zone).or_default()[status as usize] += 1;
        }
        let mut known = self.zones.lock().unwrap_or_else(|e| e.into_inner());
        for gone in known.iter().filter(|z| !counts.contains_key(z.as_str())) {
            for status in ConditionStatus::ALL {
                self.zone_nodes.remove(&ZoneLabels {
                    zone: gone.clone(),
                    status,
                });
            }
        }
        known.clear();
        for (zone, counts) in counts {
            for (status, n) in ConditionStatus::ALL.into_iter().zip(counts) {
                self.zone_nodes
                    .get_or_create(&ZoneLabels {
                        zone: zone.to_string(),
                        status,
                    })
                    .set(n);
            }
            known.insert(zone.to_string());
        }
    }

    /// Serves `kube_node_labels` for the labels `allowlist` allows
    /// (`--metric-labels-allowlist`).
    pub fn with_labels_allowlist(mut self, allowlist: LabelsAllowlist) -> Metrics {
        self.node_series = NodeSeries::new(allowlist);
        self
    }

    /// Serves the node series only if `resources` has nodes (`--resources`).
    pub fn with_resources(mut self, resources: ResourceSet) -> Metrics {
        self.node_series_served = resources.nodes();
        self
    }

    /// The exposition in `format` with kube-state-metrics' series of
    /// `nodes` (in name order), in pieces to send one after the other:
    /// nodekeeper's own families, then the node families, then the end.
    pub fn encode_with_nodes<'a>(
        &self,
        format: Exposition,
        nodes: impl ExactSizeIterator<Item = &'a crate::model::Node>,
    ) -> [bytes::Bytes; 3] {
        let own = self.encode_as(format);
        let node_text = if self.node_series_served {
            self.node_series.render(nodes)
        } else {
            bytes::Bytes::new()
        };
        match format {
            Exposition::OpenMetrics { .. } => {
                let own = own.strip_suffix("# EOF\n").unwrap_or(&own).to_string();
                [own.into(), node_text, bytes::Bytes::from_static(b"# EOF\n")]
            }
            Exposition::Text => [own.into(), node_text, bytes::Bytes::new()],
        }
    }

    /// The OpenMetrics exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// The exposition in `format`.
    pub fn encode_as(&self, format: Exposition) -> String {
        match format {
            Exposition::OpenMetrics { .. } => self.encode(),
            Exposition::Text => exposition::text_format(&self.encode()),
        }
    }

    /// Whether `source` can be followed now.
    pub fn set_source_failing(&self, source: NodeSource, failing: bool) {
        self.source_failing
            .get_or_create(&SourceLabels { source })
            .set(i64::from(failing));
    }

    /// Sets the node gauges from the statuses of every node's condition.
    pub fn set_node_counts<'a>(
        &self,
        conditions: impl Iterator<Item = (&'a str, ConditionStatus)>,
    ) {
        // Counted by borrowed name: no allocation per node on every sweep.
        let mut counts: std::collections::HashMap<(&str, ConditionStatus), i64> =
            std::collections::HashMap::new();
        for status in ConditionStatus::ALL {
            counts.insert((crate::model::READY, status), 0);
        }
        for (condition, status) in conditions {
            *counts.entry((condition, status)).or_default() += 1;
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
        assert!(
            text.contains(&format!(
                "nodekeeper_build_info{{version=\"{}\",git_commit=\"{}\"",
                crate::version::VERSION,
                crate::version::git_commit()
            )),
            "{text}"
        );
        assert!(text.contains(",site=\"\"} 1"), "no --site: {text}");
        let text = Metrics::for_site(Some("lyon-3")).encode();
        assert!(
            text.contains(",rustc_version=\"") && text.contains(",site=\"lyon-3\"} 1"),
            "{text}"
        );
        for name in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
            "process_max_fds",
            "process_start_time_seconds",
        ] {
            assert!(text.contains(&format!("\n{name} ")), "{name} in {text}");
        }
    }

    #[test]
    fn zone_counts_are_served_before_the_first_pass_and_follow_the_zones() {
        let m = Metrics::new();
        let text = m.encode();
        assert!(
            text.contains("nodekeeper_zone_nodes{zone=\"\",status=\"True\"} 0"),
            "{text}"
        );
        m.set_zone_counts(
            [("a", ConditionStatus::True), ("a", ConditionStatus::False)].into_iter(),
        );
        let text = m.encode();
        assert!(
            text.contains("nodekeeper_zone_nodes{zone=\"a\",status=\"True\"} 1"),
            "{text}"
        );
        assert!(!text.contains("zone=\"\""), "the empty zone went: {text}");
        m.set_zone_counts([("", ConditionStatus::Unknown)].into_iter());
        let text = m.encode();
        assert!(
            text.contains("nodekeeper_zone_nodes{zone=\"\",status=\"Unknown\"} 1"),
            "{text}"
        );
        assert!(!text.contains("zone=\"a\""), "zone a went: {text}");
    }
}
