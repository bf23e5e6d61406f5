//! `nodekeeper run`: validate everything, open the store, start the HTTP API
//! (and the simulated fleet, if asked), then hand over to the controller.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cli::RunArgs;
use crate::controller::view::View;
use crate::controller::CloudSource;
use crate::controller::{Controller, ControllerConfig, ControllerError, ControllerHandle};
use crate::metrics::Metrics;
use crate::model::{NodeSpec, Resources};
use crate::probe::{ProbeConfig, Scheme};
use crate::server::{AppState, Tokens};
use crate::sim::{Fleet, FleetConfig};
use crate::source::cloud::{anchored, CloudProvider};
use crate::source::{static_list, SourceError};
use crate::store::{Store, StoreError, StoreOptions};

/// Open files kept free for the store, the listener and its clients.
const SPARE_FILES: u64 = 256;

/// Everything `run` needs, validated.
pub struct RunConfig {
    pub db: PathBuf,
    pub listen: std::net::SocketAddr,
    /// Serving TLS (`--tls-cert-file`), and that certificate's path for the discovery file.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub tls_cert_file: Option<PathBuf>,
    /// `--token-file`: writes need one of these.
    pub tokens: Option<Arc<Tokens>>,
    pub store: StoreOptions,
    pub controller: ControllerConfig,
    pub specs: Vec<NodeSpec>,
    pub simulate: Option<FleetConfig>,
    /// Where to mirror, if an API server is configured.
    pub mirror: Option<crate::mirror::MirrorConfig>,
}

/// Failures of `run`, each naming the flag or resource at fault.
#[derive(Debug, Error)]
pub enum RunError {
    #[error("{flag}: {reason}")]
    Flag { flag: &'static str, reason: String },
    /// TLS, tokens or the listen policy; the message names the flags.
    #[error("{0}")]
    Serving(String),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Controller(#[from] ControllerError),
    #[error("cannot listen on {addr} (--listen): {source}")]
    Listen {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("simulated fleet: {0}")]
    Sim(#[from] crate::sim::SimError),
    #[error("{nodes} nodes need about {needed} open files but this process may open only {limit}; run large simulated fleets as separate processes (`nodekeeper sim`, at most ~5000 nodes each) or raise the hard limit (ulimit -Hn)")]
    TooManyNodes {
        nodes: usize,
        needed: u64,
        limit: u64,
    },
    #[error("cannot write {path}: {source}")]
    Discovery {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl RunConfig {
    /// Validates the flags completely, before anything is opened or bound.
    pub fn from_args(args: &RunArgs, db: &Path) -> Result<RunConfig, RunError> {
        let flag = |flag, reason: String| RunError::Flag { flag, reason };
        let capacity = Resources {
            cpu_millis: crate::quantity::parse_cpu(&args.node_cpu)
                .map_err(|e| flag("--node-cpu", e))?,
            memory_bytes: crate::quantity::parse_memory(&args.node_memory)
                .map_err(|e| flag("--node-memory", e))?,
        };
        if args.node_sync_period.is_zero() {
            return Err(flag("--node-sync-period", "must be more than zero".into()));
        }
        if args.node_monitor_grace_period.is_zero() {
            return Err(flag(
                "--node-monitor-grace-period",
                "must be more than zero".into(),
            ));
        }
        if args.kubelet_timeout.is_zero() {
            return Err(flag("--kubelet-timeout", "must be more than zero".into()));
        }
        if args.node_monitor_period.is_zero() {
            return Err(flag(
                "--node-monitor-period",
                "must be more than zero".into(),
            ));
        }
        for (name, rate) in [
            ("--node-eviction-rate", args.node_eviction_rate),
            (
                "--secondary-node-eviction-rate",
                args.secondary_node_eviction_rate,
            ),
        ] {
            if !(rate.is_finite() && rate >= 0.0) {
                return Err(flag(
                    name,
                    format!("{rate} is not a rate: give evictions per second, 0 or more"),
                ));
            }
        }
        if !(args.unhealthy_zone_threshold > 0.0 && args.unhealthy_zone_threshold <= 1.0) {
            return Err(flag(
                "--unhealthy-zone-threshold",
                "must be a share between 0 and 1, such as 0.55".into(),
            ));
        }
        if args.probe_concurrency == 0 {
            return Err(flag("--probe-concurrency", "must be at least 1".into()));
        }
        if args.node_monitor_grace_period < args.node_sync_period {
            tracing::warn!(
                "--node-monitor-grace-period ({:?}) is shorter than --node-sync-period ({:?}): one missed probe makes a node Unknown",
                args.node_monitor_grace_period,
                args.node_sync_period
            );
        }
        let mut specs = Vec::new();
        if let Some(list) = &args.nodes {
            specs.extend(static_list::parse_node_list(list, capacity)?);
        }
        if let Some(path) = &args.nodes_file {
            specs.extend(static_list::read_nodes_file(
                &path.to_string_lossy(),
                capacity,
            )?);
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(dup) = specs.iter().find(|s| !seen.insert(s.name.clone())) {
            return Err(SourceError::Duplicate {
                name: dup.name.clone(),
                first: "--nodes".into(),
                second: "--nodes-file".into(),
            }
            .into());
        }
        let cloud = match &args.cloud_provider {
            None => None,
            Some(name) => {
                let filter = anchored(args.node_match.as_deref().unwrap_or(".*"))
                    .map_err(|e| flag("--match", e))?;
                let provider: Arc<dyn CloudProvider> =
                    crate::source::provider(name, args.cloud_config.as_deref())?.into();
                if provider.instances().is_none() {
                    return Err(SourceError::CloudInstance(provider.name().to_string()).into());
                }
                Some(CloudSource {
                    provider,
                    filter,
                    sync_node_list: args.sync_node_list,
                    fallback: capacity,
                })
            }
        };
        let mut probe = ProbeConfig {
            scheme: args.kubelet_scheme,
            port: args.kubelet_port,
            timeout: args.kubelet_timeout,
            ca_file: args.kubelet_ca.clone(),
            client_cert_file: args.kubelet_client_cert.clone(),
            client_key_file: args.kubelet_client_key.clone(),
            token_file: args.kubelet_token_file.clone(),
            insecure_skip_tls_verify: args.kubelet_insecure_skip_tls_verify,
            ..ProbeConfig::default()
        };
        let simulate = args.simulate.map(|nodes| FleetConfig {
            nodes,
            base_ip: args.simulate_base_ip,
            port: 0,
            control: args.simulate_control,
            ..FleetConfig::default()
        });
        if simulate.is_some() {
            // Simulated kubelets speak plain HTTP on a port of their choosing.
            probe.scheme = Scheme::Http;
        }
        if probe.insecure_skip_tls_verify && probe.scheme == Scheme::Https {
            tracing::warn!("--kubelet-insecure-skip-tls-verify: kubelet certificates are NOT verified; anyone on the path can impersonate a kubelet");
        }
        // Fail on bad certificates or tokens now, not at the first sweep.
        if args.node_status_mode != crate::controller::StatusMode::Push {
            crate::probe::Prober::new(&probe).map_err(|e| flag("kubelet access", e.to_string()))?;
        }
        let tls = match (&args.tls_cert_file, &args.tls_private_key_file) {
            (None, None) => None,
            (Some(cert), Some(key)) => {
                Some(crate::server::tls_config(cert, key).map_err(RunError::Serving)?)
            }
            (Some(_), None) => {
                return Err(flag(
                    "--tls-cert-file",
                    "needs --tls-private-key-file, the certificate's private key".into(),
                ))
            }
            (None, Some(_)) => {
                return Err(flag(
                    "--tls-private-key-file",
                    "needs --tls-cert-file, the certificate it belongs to".into(),
                ))
            }
        };
        let tokens = match &args.token_file {
            None => None,
            Some(path) => Some(Arc::new(Tokens::load(path).map_err(RunError::Serving)?)),
        };
        crate::server::check_listen(
            args.listen,
            tls.is_some(),
            tokens.is_some(),
            args.insecure_listen,
        )
        .map_err(RunError::Serving)?;
        if args.insecure_listen && (tls.is_none() || tokens.is_none()) {
            tracing::warn!(
                listen = %args.listen,
                tls = tls.is_some(),
                tokens = tokens.is_some(),
                "--insecure-listen: the API may be reachable from the network without TLS or authentication"
            );
        }
        let mirror = mirror_config(args)?;
        if mirror.is_none()
            && args.eviction_mode == crate::controller::eviction::EvictionMode::DeletePods
        {
            return Err(flag(
                "--eviction-mode",
                "delete-pods deletes pods on an API server, and none is configured: give --kubeconfig or --master, or use taint (with an --eviction-hook) when running alone".into(),
            ));
        }
        Ok(RunConfig {
            mirror,
            db: db.to_path_buf(),
            listen: args.listen,
            tls,
            // Absolute, so the CLI finds it from any directory.
            tls_cert_file: args
                .tls_cert_file
                .as_ref()
                .map(|p| std::path::absolute(p).unwrap_or_else(|_| PathBuf::from(p))),
            tokens,
            store: StoreOptions {
                cache_capacity: args.cache_capacity,
            },
            controller: ControllerConfig {
                node_sync_period: args.node_sync_period,
                node_monitor_grace_period: args.node_monitor_grace_period,
                node_monitor_period: args.node_monitor_period,
                node_startup_grace_period: args.node_startup_grace_period,
                status_mode: args.node_status_mode,
                allow_node_registration: args.allow_node_registration,
                register_retry_count: args.register_retry_count,
                probe,
                probe_concurrency: args.probe_concurrency,
                cloud,
                eviction: crate::controller::eviction::EvictionConfig {
                    pod_eviction_timeout: args.pod_eviction_timeout,
                    mode: args.eviction_mode,
                    hook: args.eviction_hook.clone(),
                    node_eviction_rate: args.node_eviction_rate,
                    secondary_node_eviction_rate: args.secondary_node_eviction_rate,
                    unhealthy_zone_threshold: args.unhealthy_zone_threshold,
                    large_cluster_size_threshold: args.large_cluster_size_threshold,
                    ..Default::default()
                },
                ..ControllerConfig::default()
            },
            specs,
            simulate,
        })
    }
}

/// The mirror's configuration, validated; `None` when running alone.
fn mirror_config(args: &RunArgs) -> Result<Option<crate::mirror::MirrorConfig>, RunError> {
    use crate::mirror::{ApiServer, LeaderConfig, MirrorConfig};
    let flag = |flag, reason: String| RunError::Flag { flag, reason };
    let Some(api_server) = ApiServer::from_flags(
        args.kubeconfig.clone(),
        args.master.clone(),
        args.standalone,
    ) else {
        return Ok(None);
    };
    if let Some(qps) = args.kube_api_qps {
        if !(qps.is_finite() && qps > 0.0) {
            return Err(flag(
                "--kube-api-qps",
                format!("{qps} is not a rate: give requests per second, more than 0"),
            ));
        }
    }
    if args.kube_api_burst == Some(0) {
        return Err(flag("--kube-api-burst", "must be at least 1".into()));
    }
    if args.kube_api_timeout.is_zero() {
        return Err(flag("--kube-api-timeout", "must be more than zero".into()));
    }
    if args.node_lease_duration < Duration::from_secs(1) {
        return Err(flag("--node-lease-duration", "must be at least 1s".into()));
    }
    let renew = args
        .node_lease_renew_interval
        .unwrap_or(args.node_lease_duration / 3);
    if renew.is_zero() || renew >= args.node_lease_duration {
        return Err(flag(
            "--node-lease-renew-interval",
            format!(
                "must be more than zero and shorter than --node-lease-duration ({}); a third of it is usual",
                crate::duration::format(args.node_lease_duration)
            ),
        ));
    }
    if !args.mirror_leases && args.node_lease_renew_interval.is_some() {
        return Err(flag(
            "--node-lease-renew-interval",
            "has no effect with --mirror-leases=false: give one or the other".into(),
        ));
    }
    let mut config = MirrorConfig::new(api_server);
    config.budget = crate::mirror::BudgetFlags {
        qps: args.kube_api_qps,
        burst: args.kube_api_burst,
    };
    config.request_timeout = args.kube_api_timeout;
    config.node_lease_duration = args.node_lease_duration;
    config.node_lease_renew_interval = args.mirror_leases.then_some(renew);
    config.eviction_hold = args.node_monitor_grace_period;
    if args.leader_elect {
        let mut leader = LeaderConfig::new(identity());
        leader.lease_duration = args.leader_elect_lease_duration;
        leader.renew_deadline = args.leader_elect_renew_deadline;
        leader.retry_period = args.leader_elect_retry_period;
        leader.name = args.leader_elect_resource_name.clone();
        leader.namespace = args.leader_elect_resource_namespace.clone();
        leader
            .validate()
            .map_err(|reason| flag("--leader-elect-*", reason))?;
        config.leader = Some(leader);
    }
    Ok(Some(config))
}

/// This process in a leader Lease: the host name and a fresh id, as
/// kube-controller-manager does.
fn identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let host = if host.is_empty() {
        "nodekeeper".into()
    } else {
        host
    };
    format!("{host}_{}", uuid::Uuid::new_v4())
}

/// Where a running controller can be reached; written into the store
/// directory so inspection commands find it while it holds the lock.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Discovery {
    pub pid: u32,
    pub url: String,
    pub instance: String,
    #[serde(rename = "simControl", skip_serializing_if = "Option::is_none")]
    pub sim_control: Option<String>,
    /// The serving certificate when `url` is https: what the CLI trusts.
    #[serde(rename = "caFile", default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
}

impl Discovery {
    pub const FILE: &'static str = "controller.json";

    pub fn path(db: &Path) -> PathBuf {
        db.join(Self::FILE)
    }

    /// Reads the discovery file of a store, if there is one.
    pub fn read(db: &Path) -> Option<Discovery> {
        serde_json::from_slice(&std::fs::read(Self::path(db)).ok()?).ok()
    }

    fn write(&self, db: &Path) -> Result<(), RunError> {
        let path = Self::path(db);
        let tmp = db.join(".controller.json.tmp");
        let body = serde_json::to_vec_pretty(self).unwrap_or_default();
        std::fs::write(&tmp, body)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|source| RunError::Discovery { path, source })
    }
}

/// Where a local client reaches a listener: a wildcard address becomes loopback.
fn reachable(local: std::net::SocketAddr) -> std::net::SocketAddr {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    match local.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => (Ipv4Addr::LOCALHOST, local.port()).into(),
        IpAddr::V6(ip) if ip.is_unspecified() => (Ipv6Addr::LOCALHOST, local.port()).into(),
        _ => local,
    }
}

/// Raises the open-file soft limit to the hard limit; returns the limit in force.
pub fn raise_open_file_limit() -> u64 {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => limit,
        Err(e) => {
            tracing::warn!("cannot raise the open-file limit: {e}");
            rlimit::getrlimit(rlimit::Resource::NOFILE)
                .map(|(soft, _)| soft)
                .unwrap_or(1024)
        }
    }
}

/// Runs the controller until `shutdown`.
pub async fn run(mut config: RunConfig, shutdown: CancellationToken) -> Result<(), RunError> {
    let limit = raise_open_file_limit();
    let sim_nodes = config.simulate.as_ref().map_or(0, |s| s.nodes);
    // Each node costs a probe connection; a simulated one also its listener and server side.
    let needed = (config.specs.len() + sim_nodes * 3) as u64 + SPARE_FILES;
    if needed > limit {
        return Err(RunError::TooManyNodes {
            nodes: config.specs.len() + sim_nodes,
            needed,
            limit,
        });
    }

    let client = match &config.mirror {
        None => None,
        Some(mirror) => {
            Some(
                crate::mirror::Mirror::connect(mirror)
                    .await
                    .map_err(|e| RunError::Flag {
                        flag: "--kubeconfig/--master",
                        reason: e.to_string(),
                    })?,
            )
        }
    };
    let store = Arc::new(Store::open(&config.db, &config.store)?);
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| RunError::Listen {
            addr: config.listen,
            source,
        })?;
    let local = listener.local_addr().map_err(|source| RunError::Listen {
        addr: config.listen,
        source,
    })?;

    let tasks = TaskTracker::new();
    let fleet = match config.simulate.take() {
        None => None,
        Some(fleet_config) => {
            let fleet = Fleet::start(fleet_config, shutdown.child_token()).await?;
            config.controller.probe.port = fleet.port();
            config.specs.extend(fleet.nodes().iter().map(|n| {
                static_list::static_spec(
                    n.name.clone(),
                    Some(&n.address.ip().to_string()),
                    Default::default(),
                    Resources::default(),
                )
            }));
            tracing::info!(
                nodes = fleet.nodes().len(),
                port = fleet.port(),
                control = %format!("http://{}", fleet.control_addr()),
                "simulated kubelets are up; break one with `nodekeeper sim set NODE down`"
            );
            Some(fleet)
        }
    };

    let view = Arc::new(View::default());
    let metrics = Arc::new(Metrics::new());
    let (handle, pushes) = ControllerHandle::channel();
    let mirror = match (config.mirror.take(), client) {
        (Some(mirror_config), Some(client)) => {
            // Every change from here on queues its mirror work.
            store.enable_outbox();
            let identity = mirror_config
                .leader
                .as_ref()
                .map_or_else(|| "nodekeeper".to_string(), |l| l.identity.clone());
            let target = mirror_config.api_server.describe();
            let (mirror, state) = crate::mirror::Mirror::new(
                mirror_config,
                client,
                store.clone(),
                view.clone(),
                handle.clone(),
                metrics.clone(),
                identity,
            );
            tracing::info!(server = %state.server, via = %target, "mirroring to the API server");
            Some((mirror, state))
        }
        _ => None,
    };
    let controller = Controller::start(
        config.controller,
        store.clone(),
        view.clone(),
        metrics.clone(),
    )
    .await?;
    let discovery = Discovery {
        pid: std::process::id(),
        url: format!(
            "{}://{}",
            if config.tls.is_some() {
                "https"
            } else {
                "http"
            },
            reachable(local)
        ),
        instance: controller.instance().to_string(),
        sim_control: fleet
            .as_ref()
            .map(|f| format!("http://{}", f.control_addr())),
        ca_file: config.tls_cert_file.clone(),
    };
    discovery.write(&config.db)?;
    tracing::info!(url = %discovery.url, db = %config.db.display(), "serving the API");

    let server_shutdown = CancellationToken::new();
    let mirror_shutdown = CancellationToken::new();
    let (mirror_task, mirror_state) = match mirror {
        None => (None, None),
        Some((mirror, state)) => (
            Some(tokio::spawn(mirror.run(mirror_shutdown.clone()))),
            Some(state),
        ),
    };
    let state = AppState {
        view,
        store: store.clone(),
        metrics,
        controller: handle,
        shutdown: server_shutdown.clone(),
        mirror: mirror_state,
    };
    let router = crate::server::secured_router(state, config.tokens.clone());
    let server = tasks.spawn({
        let stop = server_shutdown.clone();
        let tls = config.tls.clone();
        async move { crate::server::serve(listener, router, tls, stop).await }
    });
    tasks.close();

    let result = controller.run(config.specs, pushes, shutdown.clone()).await;
    // The mirror stops before the store closes (it gives up a leader Lease it holds).
    mirror_shutdown.cancel();
    if let Some(task) = mirror_task {
        let _ = task.await;
    }
    // The API goes last so the final state stays readable until the store is closed.
    server_shutdown.cancel();
    if let Ok(Err(e)) = server.await {
        tracing::warn!("HTTP server stopped with an error: {e}");
    }
    if let Some(fleet) = fleet {
        shutdown.cancel();
        fleet.closed().await;
    }
    tasks.wait().await;
    let _ = std::fs::remove_file(Discovery::path(&config.db));
    result.map_err(RunError::from)
}
