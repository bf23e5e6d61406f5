//! Prometheus metrics, on a registry of our own (no globals). No per-node
//! labels: a 10k-node site must not mean 10k series.
//!
//! `Metrics::new` is long (about 400 lines) on purpose: it is the one list of
//! every metric, its help text and its registration, which the metrics
//! table of docs/guide/operations.md documents (`cli/tests/dashboards.rs` checks that every
//! family served is in it).

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::model::ConditionStatus;

mod exposition;
pub mod nodes;

pub use exposition::Exposition;
pub use nodes::{LabelsAllowlist, NodeSeries, ResourceSet};

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
    pub status: Status,
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
    status_heartbeats: Counter,
    lease_heartbeats: Counter,
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

/// A wall-clock time as Unix seconds, for `*_timestamp_seconds` gauges.
impl Metrics {
    /// `nodekeeper_credential_file_stale` for the file of `flag`.
    pub fn credential_file_stale(&self, flag: &str) -> Gauge {
        self.credential_file_stale
            .get_or_create(&CredentialFileLabels { file: flag.into() })
            .clone()
    }
}

pub fn unix_seconds(t: crate::model::Micros) -> f64 {
    t.0 as f64 / 1e6
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
    /// the scrape configuration (docs/decisions/site-label.md). Over 80
    /// lines: it is the catalogue of metrics, one registration with its
    /// help text per series, read whole.
    pub fn for_site(site: Option<&str>) -> Metrics {
        let mut root = Registry::default();
        // The standard process_* series carry no prefix; ours all do.
        root.register_collector(Box::new(crate::process::ProcessCollector));
        let registry = root.sub_registry_with_prefix("nodekeeper");
        let build = crate::version::build_info();
        registry.register(
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
        let store_writable = Gauge::default();
        store_writable.set(1);
        registry.register(
            "store_writable",
            "1 while the store takes writes; 0 while it refuses them (a disk short of space, a failed write)",
            store_writable.clone(),
        );
        let store_flushes = Counter::default();
        registry.register(
            "store_flushes",
            "Flushes of the store; each makes a group of changes durable",
            store_flushes.clone(),
        );
        let store_flush_duration = Histogram::new(
            prometheus_client::metrics::histogram::exponential_buckets(0.0001, 2.0, 16),
        );
        registry.register(
            "store_flush_duration_seconds",
            "Time to make one group of changes durable",
            store_flush_duration.clone(),
        );
        let store_group_size = Histogram::new(
            prometheus_client::metrics::histogram::exponential_buckets(1.0, 2.0, 13),
        );
        registry.register(
            "store_group_size",
            "Changes made durable by one flush (group commit)",
            store_group_size.clone(),
        );
        let registered = Gauge::default();
        registry.register(
            "registered_nodes",
            "Nodes in the registry",
            registered.clone(),
        );
        let unregistered = Gauge::default();
        registry.register(
            "unregistered_nodes",
            "Nodes a source names that are not registered yet (registration is tried again until they are)",
            unregistered.clone(),
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
        let source_failing = Family::<SourceLabels, Gauge>::default();
        registry.register(
            "source_failing",
            "1 while a source of nodes cannot be followed (a nodes file that does not parse or cannot be read, a failed listing), else 0; the registry is left as it is meanwhile",
            source_failing.clone(),
        );
        for source in [NodeSource::NodesFile, NodeSource::Cloud] {
            let _ = source_failing.get_or_create(&SourceLabels { source });
        }
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
        let mirror_configured = Gauge::default();
        registry.register(
            "mirror_configured",
            "1 when this controller mirrors to an API server (--kubeconfig or --master), else 0",
            mirror_configured.clone(),
        );
        let last_sweep = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "last_sweep_timestamp_seconds",
            "When the last probe sweep finished and its results were stored (Unix seconds; 0 before the first)",
            last_sweep.clone(),
        );
        let last_monitor_pass = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "last_monitor_pass_timestamp_seconds",
            "When the last monitor pass (silence check and eviction) finished (Unix seconds; 0 before the first)",
            last_monitor_pass.clone(),
        );
        let controller_lag = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "controller_lag_seconds",
            "The longest the controller went without running (starved of CPU, stopped or suspended) within the last 30 seconds; 0 while it runs on time. Grace periods are extended by as much",
            controller_lag.clone(),
        );
        let controller_away = Counter::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "controller_away_seconds",
            "Time the controller went without running, in all: what its own clock leaves out of every grace period",
            controller_away.clone(),
        );
        let http_connections = Gauge::default();
        registry.register(
            "http_connections",
            "API connections open",
            http_connections.clone(),
        );
        let http_connections_evicted = Counter::default();
        registry.register(
            "http_connections_evicted",
            "Idle API connections closed to make room for new ones (the connection cap was reached)",
            http_connections_evicted.clone(),
        );
        let http_connections_stalled = Counter::default();
        registry.register(
            "http_connections_stalled",
            "API connections closed because their clients took nothing of the responses they were given for the stall timeout",
            http_connections_stalled.clone(),
        );
        let http_inflight = Family::<RequestKindLabels, Gauge>::default();
        registry.register(
            "http_inflight_requests",
            "API requests being served, by budget (watches, other reads, writes)",
            http_inflight.clone(),
        );
        let http_rejected = Family::<RejectedLabels, Counter>::default();
        registry.register(
            "http_rejected_requests",
            "API requests refused before being handled: budget full (429) or body too slow (408)",
            http_rejected.clone(),
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
        let zone_nodes = Family::<ZoneLabels, Gauge>::default();
        // Served from the start, at 0 in the empty zone until the first
        // monitor pass counts the nodes (an empty family is not served at all).
        for status in [Status::True, Status::False, Status::Unknown] {
            zone_nodes
                .get_or_create(&ZoneLabels {
                    zone: String::new(),
                    status,
                })
                .set(0);
        }
        registry.register(
            "zone_nodes",
            "Nodes by zone (topology.kubernetes.io/zone) and Ready status, as of the last monitor pass",
            zone_nodes.clone(),
        );
        let hook_runs = Family::<HookRunLabels, Counter>::default();
        registry.register(
            "transition_hook_runs",
            "Runs of --transition-hook, by how they ended",
            hook_runs.clone(),
        );
        let hook_duration = Histogram::new(
            prometheus_client::metrics::histogram::exponential_buckets(0.001, 2.0, 16),
        );
        registry.register(
            "transition_hook_duration_seconds",
            "Time one --transition-hook run took",
            hook_duration.clone(),
        );
        let hook_last_seq = Gauge::default();
        registry.register(
            "transition_hook_last_seq",
            "Seq of the last event --transition-hook is done with (kept in the store)",
            hook_last_seq.clone(),
        );
        let hook_pending = Gauge::default();
        registry.register(
            "transition_hook_pending_events",
            "Durable events --transition-hook has not looked at yet (transitions and others)",
            hook_pending.clone(),
        );
        let hook_lag = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "transition_hook_lag_seconds",
            "Age of the transition last handed to --transition-hook when it was handed over (0 while it has nothing to do)",
            hook_lag.clone(),
        );
        let backups = Family::<BackupLabels, Counter>::default();
        registry.register(
            "backups",
            "Scheduled backups (--backup-dir), by how they ended",
            backups.clone(),
        );
        for result in [BackupResult::Succeeded, BackupResult::Failed] {
            let _ = backups.get_or_create(&BackupLabels { result });
        }
        let backup_last_success = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "backup_last_success_timestamp_seconds",
            "When the last scheduled backup was written whole (Unix seconds; 0 before the first)",
            backup_last_success.clone(),
        );
        let backup_last_seq = Gauge::default();
        registry.register(
            "backup_last_seq",
            "The seq the last scheduled backup is a snapshot of",
            backup_last_seq.clone(),
        );
        let backup_last_bytes = Gauge::default();
        registry.register(
            "backup_last_size_bytes",
            "Size of the last scheduled backup",
            backup_last_bytes.clone(),
        );
        let backup_last_duration = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "backup_last_duration_seconds",
            "Time the last scheduled backup took to write",
            backup_last_duration.clone(),
        );
        let credential_file_stale = Family::<CredentialFileLabels, Gauge>::default();
        // Served at 0 from the start (an empty family is not served at all).
        for file in ["token-file", "client-ca-file", "tls-cert-file"] {
            credential_file_stale
                .get_or_create(&CredentialFileLabels { file: file.into() })
                .set(0);
        }
        registry.register(
            "credential_file_stale",
            "1 while a credential file (--token-file, --client-ca-file, --tls-cert-file) changed on disk but cannot be read or used, so its last good copy is still in use; else 0",
            credential_file_stale.clone(),
        );
        // Counters and label values known up front are exported at 0 from
        // the start: a rate() or an alert has a series before the first event.
        for status in [Status::True, Status::False, Status::Unknown] {
            let labels = ConditionLabels {
                condition: crate::model::READY.into(),
                status,
            };
            let _ = nodes.get_or_create(&labels);
            let _ = transitions.get_or_create(&labels);
        }
        for result in [
            ProbeResult::Healthy,
            ProbeResult::Unhealthy,
            ProbeResult::NoAnswer,
        ] {
            let _ = probes.get_or_create(&ProbeLabels { result });
        }
        for via in [Via::Status, Via::Lease] {
            let _ = heartbeats.get_or_create(&HeartbeatLabels { via });
        }
        for quantile in ["0.5", "0.99", "1"] {
            let _ = heartbeat_age.get_or_create(&QuantileLabels {
                quantile: quantile.into(),
            });
        }
        for kind in [RequestKind::Watch, RequestKind::Read, RequestKind::Mutating] {
            let _ = http_inflight.get_or_create(&RequestKindLabels { kind: kind.clone() });
            for reason in [
                RejectReason::TooManyRequests,
                RejectReason::ClientShare,
                RejectReason::BodyTimeout,
            ] {
                let _ = http_rejected.get_or_create(&RejectedLabels {
                    kind: kind.clone(),
                    reason,
                });
            }
        }
        // The mirror's answered requests; other codes appear as they are met.
        for verb in MIRROR_VERBS {
            let _ = mirror_requests.get_or_create(&MirrorRequestLabels {
                verb: verb.to_string(),
                code: "2xx".into(),
            });
        }
        for result in [
            HookResult::Succeeded,
            HookResult::Failed,
            HookResult::TimedOut,
        ] {
            let _ = hook_runs.get_or_create(&HookRunLabels { result });
        }
        let status_heartbeats = heartbeats
            .get_or_create(&HeartbeatLabels { via: Via::Status })
            .clone();
        let lease_heartbeats = heartbeats
            .get_or_create(&HeartbeatLabels { via: Via::Lease })
            .clone();
        let inflight = [RequestKind::Watch, RequestKind::Read, RequestKind::Mutating].map(|kind| {
            http_inflight
                .get_or_create(&RequestKindLabels { kind })
                .clone()
        });
        Metrics {
            credential_file_stale,
            backups,
            backup_last_success,
            backup_last_seq,
            backup_last_bytes,
            backup_last_duration,
            site: site.map(str::to_string),
            node_series: NodeSeries::default(),
            node_series_served: true,
            status_heartbeats,
            lease_heartbeats,
            inflight,
            zone_nodes,
            zones: std::sync::Mutex::new([String::new()].into()),
            hook_runs,
            hook_duration,
            hook_last_seq,
            hook_pending,
            hook_lag,
            last_sweep,
            last_monitor_pass,
            controller_lag,
            controller_away,
            http_connections,
            http_connections_evicted,
            http_connections_stalled,
            http_inflight,
            http_rejected,
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
            mirror_configured,
            source_sync_duration,
            source_failures,
            source_failing,
            source_machines,
            evictions,
            heartbeats,
            heartbeat_age,
            pushing,
            registry: root,
            nodes,
            transitions,
            probes,
            probe_duration,
            sweep_duration,
            store_size,
            store_events,
            store_writable,
            store_flushes,
            store_flush_duration,
            store_group_size,
            registered,
            unregistered,
        }
    }

    /// `nodekeeper_heartbeats_total` of one kind of heartbeat.
    pub fn heartbeat_counter(&self, via: Via) -> &Counter {
        match via {
            Via::Status => &self.status_heartbeats,
            Via::Lease => &self.lease_heartbeats,
        }
    }

    /// `nodekeeper_http_inflight_requests` of one budget.
    pub fn inflight_gauge(&self, kind: &RequestKind) -> &Gauge {
        match kind {
            RequestKind::Watch => &self.inflight[0],
            RequestKind::Read => &self.inflight[1],
            RequestKind::Mutating => &self.inflight[2],
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
        let mut counts: std::collections::BTreeMap<&str, [i64; 3]> = Default::default();
        for (zone, status) in nodes {
            let at = match status {
                ConditionStatus::True => 0,
                ConditionStatus::False => 1,
                ConditionStatus::Unknown => 2,
            };
            counts.entry(zone).or_default()[at] += 1;
        }
        let mut known = self.zones.lock().unwrap_or_else(|e| e.into_inner());
        for gone in known.iter().filter(|z| !counts.contains_key(z.as_str())) {
            for status in [Status::True, Status::False, Status::Unknown] {
                self.zone_nodes.remove(&ZoneLabels {
                    zone: gone.clone(),
                    status,
                });
            }
        }
        known.clear();
        for (zone, [ready, not_ready, unknown]) in counts {
            for (status, n) in [
                (Status::True, ready),
                (Status::False, not_ready),
                (Status::Unknown, unknown),
            ] {
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
