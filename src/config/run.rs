//! `run`'s configuration: every flag validated into a [`RunConfig`] before a
//! port is bound or the store opened; the HTTP API is sized by `sizing.rs`.
//!
//! `RunConfig::from_args` reads as the list of steps, in the order the help
//! shows the flags (so the first error names the first bad flag); each step
//! is a function checking one concern: periods and rates, the node list, the
//! cloud source, probing, serving, retention, the mirror, the API's sizing.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;

use crate::cli::RunArgs;
use crate::controller::CloudSource;
use crate::controller::{ControllerConfig, ControllerError};
use crate::model::{NodeSpec, Resources};
use crate::probe::{ProbeConfig, Scheme};
use crate::server::reload::{Credentials, Reloadable};
use crate::server::x509::ClientCa;
use crate::server::{ApiLimits, Tokens};
use crate::simulate::{SimulateRequest, Simulator, StartError};
use crate::source::cloud::{anchored, CloudProvider};
use crate::source::{static_list, SourceError};
use crate::store::{StoreError, StoreOptions};

use super::sizing::{size_api, ApiSizing, SizingError, SizingInput, READER_CONNECTIONS};

/// Everything `run` needs, validated.
pub struct RunConfig {
    /// `--site`: this site's name, if given.
    pub site: Option<String>,
    /// `--backup-dir` and its companions.
    pub backups: Option<crate::backups::BackupConfig>,
    /// `--metric-labels-allowlist`.
    pub labels_allowlist: crate::metrics::LabelsAllowlist,
    /// `--resources`: whether the node series are served.
    pub resources: crate::metrics::ResourceSet,
    pub db: PathBuf,
    pub listen: std::net::SocketAddr,
    /// Serving TLS (`--tls-cert-file`), and that certificate's path for the discovery file.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub tls_cert_file: Option<PathBuf>,
    /// `--token-file`, `--client-ca-file` and the serving certificate, each
    /// followed on disk once `run` starts.
    pub credentials: Credentials,
    /// `--enable-bootstrap-token-auth`: bearer tokens may be bootstrap tokens.
    pub bootstrap_token_auth: bool,
    /// `--cluster-signing-cert-file` and its key: what signs approved CSRs.
    pub signer: Option<Arc<crate::certificates::Signer>>,
    pub store: StoreOptions,
    pub controller: ControllerConfig,
    pub specs: Vec<NodeSpec>,
    /// `--simulate`: kubelets to start in this process, by [`RunConfig::simulator`].
    pub simulate: Option<SimulateRequest>,
    /// What starts them: the binary's simulator (`nodekeeper-sim`). Without
    /// one, `run` refuses `--simulate`.
    pub simulator: Option<Arc<dyn Simulator>>,
    /// Where the API is served: a runtime apart from the controller's, so
    /// that readers never delay its work. `None` serves it on the runtime
    /// `run` runs on.
    pub api_runtime: Option<tokio::runtime::Handle>,
    /// `--list-bytes-per-second` (0: no limit).
    pub list_bytes_per_second: u64,
    /// Where to mirror, if an API server is configured.
    pub mirror: Option<crate::mirror::MirrorConfig>,
    /// How much history to keep (`--history-retention`, `--history-max-bytes`).
    pub retention: crate::store::RetentionConfig,
    /// The open-file limit in force (raised to the hard limit).
    pub open_files: u64,
    /// How the API is served: its connection cap and timeouts.
    pub serve: crate::server::ServeConfig,
    /// The API's request budgets and body deadline.
    pub limits: ApiLimits,
    /// `--transition-hook`, if given.
    pub transition_hook: Option<crate::hook::transitions::TransitionHookConfig>,
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
    /// `--listen` off loopback without TLS or tokens.
    #[error(transparent)]
    InsecureListen(#[from] crate::server::InsecureListen),
    /// The connection cap and request budgets do not fit.
    #[error(transparent)]
    Sizing(#[from] SizingError),
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
    Sim(StartError),
    #[error(
        "--simulate: this build has no simulator; run the nodekeeper binary, which carries one"
    )]
    NoSimulator,
    #[error("{nodes} nodes need about {needed} open files but this process may open only {limit}; run large simulated fleets as separate processes (`nodekeeper sim`, at most ~5000 nodes each) or raise the hard limit (ulimit -Hn)")]
    TooManyNodes {
        nodes: usize,
        needed: u64,
        limit: u64,
    },
    /// A supervised task (the controller, the HTTP server, the mirror)
    /// failed or stopped on its own: the process exits non-zero.
    #[error("the {task} task failed: {reason}")]
    TaskFailed { task: &'static str, reason: String },
    #[error("cannot write {path}: {source}")]
    Discovery {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl RunConfig {
    /// Validates the flags completely, before anything is opened or bound.
    /// The steps run in the order the help shows the flags, so the first
    /// error named is the first bad flag.
    pub fn from_args(args: &RunArgs, db: &Path) -> Result<RunConfig, RunError> {
        let site = site(args)?;
        let labels_allowlist = match &args.metric_labels_allowlist {
            None => crate::metrics::LabelsAllowlist::default(),
            Some(text) => crate::metrics::LabelsAllowlist::parse(text)
                .map_err(|e| flag("--metric-labels-allowlist", e))?,
        };
        let resources = match &args.resources {
            None => crate::metrics::ResourceSet::default(),
            Some(text) => {
                crate::metrics::ResourceSet::parse(text).map_err(|e| flag("--resources", e))?
            }
        };
        let capacity = node_capacity(args)?;
        check_periods_and_rates(args)?;
        check_api_server_flags(args)?;
        check_probing(args)?;
        let has_store = crate::store::exists(db);
        let specs = node_specs(args, capacity, has_store)?;
        let cloud = cloud_source(args, capacity, has_store)?;
        let (probe, simulate) = probe_config(args)?;
        let (tls, credentials) = serving(args)?;
        let signer = signer(args)?;
        if args.enable_bootstrap_token_auth
            && credentials.tokens.is_none()
            && credentials.client_ca.is_none()
        {
            return Err(flag(
                "--enable-bootstrap-token-auth",
                "needs --token-file (or --client-ca-file): bootstrap tokens are made and removed \
                 by operators, who authenticate with those"
                    .into(),
            ));
        }
        let retention = retention(args)?;
        let mirror = mirror_config(args)?;
        let (open_files, sizing) = api_sizing(args, specs.len())?;
        check_eviction_mode(args, mirror.is_some())?;
        let transition_hook = transition_hook(args, site.as_deref())?;
        let list_bytes_per_second = bytes_or_zero(&args.list_bytes_per_second)
            .map_err(|e| flag("--list-bytes-per-second", e.to_string()))?;
        let backups = backups(args, site.as_deref())?;
        Ok(RunConfig {
            backups,
            site,
            labels_allowlist,
            resources,
            transition_hook,
            mirror,
            retention,
            db: db.to_path_buf(),
            listen: args.listen,
            tls,
            // Absolute, so the CLI finds it from any directory.
            tls_cert_file: args
                .tls_cert_file
                .as_ref()
                .map(|p| std::path::absolute(p).unwrap_or_else(|_| PathBuf::from(p))),
            credentials,
            bootstrap_token_auth: args.enable_bootstrap_token_auth,
            signer,
            store: StoreOptions {
                cache_capacity: args.cache_capacity,
                checkpoint_interval: args.history_checkpoint_interval,
            },
            controller: controller_config(args, capacity, probe, cloud),
            specs,
            simulate,
            simulator: None,
            api_runtime: None,
            list_bytes_per_second,
            open_files,
            serve: crate::server::ServeConfig::default().max_connections(sizing.max_connections),
            limits: sizing.limits,
        })
    }
}

/// `RunError::Flag` for `flag`, with the reason it was refused.
fn flag(flag: &'static str, reason: String) -> RunError {
    RunError::Flag { flag, reason }
}

/// `--site`: a Kubernetes label value (so it can be a label anywhere: a
/// Prometheus target label, a Node label, a file name), not empty.
fn site(args: &RunArgs) -> Result<Option<String>, RunError> {
    let Some(name) = &args.site else {
        return Ok(None);
    };
    if name.is_empty() {
        return Err(flag(
            "--site",
            "the name is empty; give the site a name, or leave the flag out".into(),
        ));
    }
    match crate::model::validation::label_value("", name).first() {
        Some(e) => Err(flag("--site", e.to_string())),
        None => Ok(Some(name.clone())),
    }
}

/// `--backup-dir`, `--backup-interval`, `--backup-keep`: the directory is
/// made if missing.
fn backups(
    args: &RunArgs,
    site: Option<&str>,
) -> Result<Option<crate::backups::BackupConfig>, RunError> {
    let Some(dir) = &args.backup_dir else {
        return Ok(None);
    };
    if args.backup_interval < std::time::Duration::from_secs(1) {
        return Err(flag(
            "--backup-interval",
            "must be 1s or more, e.g. 1h".into(),
        ));
    }
    if args.backup_keep == 0 {
        return Err(flag(
            "--backup-keep",
            "must be 1 or more: the newest backups kept".into(),
        ));
    }
    // Start-up, before the runtime does anything else.
    #[allow(clippy::disallowed_methods)]
    std::fs::create_dir_all(dir).map_err(|e| {
        flag(
            "--backup-dir",
            format!("cannot make {}: {e}", dir.display()),
        )
    })?;
    Ok(Some(crate::backups::BackupConfig {
        dir: dir.clone(),
        interval: args.backup_interval,
        keep: args.backup_keep,
        site: site.map(str::to_string),
    }))
}

/// A node's capacity when its source gives none (`--node-cpu`, `--node-memory`).
fn node_capacity(args: &RunArgs) -> Result<Resources, RunError> {
    Ok(Resources {
        cpu_millis: crate::quantity::parse_cpu(&args.node_cpu)
            .map_err(|e| flag("--node-cpu", e.to_string()))?,
        memory_bytes: crate::quantity::parse_memory(&args.node_memory)
            .map_err(|e| flag("--node-memory", e.to_string()))?,
    })
}

/// The controller's periods, eviction rates, zone threshold and kubelet port.
fn check_periods_and_rates(args: &RunArgs) -> Result<(), RunError> {
    for (name, period) in [
        ("--node-sync-period", args.node_sync_period),
        (
            "--node-monitor-grace-period",
            args.node_monitor_grace_period,
        ),
        ("--kubelet-timeout", args.kubelet_timeout),
        ("--node-monitor-period", args.node_monitor_period),
    ] {
        if period.is_zero() {
            return Err(flag(name, "must be more than zero".into()));
        }
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
    if args.kubelet_port == 0 {
        return Err(flag(
            "--kubelet-port",
            "0 is not a port a kubelet listens on: give one from 1 to 65535 (kubelets serve on 10250)".into(),
        ));
    }
    Ok(())
}

/// `--probe-concurrency`, and a warning when one missed probe makes a node Unknown.
fn check_probing(args: &RunArgs) -> Result<(), RunError> {
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
    Ok(())
}

/// The nodes of `--nodes` and `--nodes-file`, each name given once across both.
///
/// The nodes file is the site's data, which changes while the controller
/// runs, not its configuration: with a store (a registry to keep), one that
/// cannot be read or parsed starts the controller with the registry as
/// stored, and the controller reports it (`/readyz`, a metric, the history)
/// as it does when the file turns bad while running. Only a first start
/// refuses it, having nothing to keep.
fn node_specs(
    args: &RunArgs,
    capacity: Resources,
    has_store: bool,
) -> Result<Vec<NodeSpec>, RunError> {
    let mut specs = Vec::new();
    if let Some(list) = &args.nodes {
        specs.extend(static_list::parse_node_list(list, capacity)?);
    }
    if let Some(path) = &args.nodes_file {
        match static_list::read_nodes_file(&path.to_string_lossy(), capacity) {
            Ok(listed) => specs.extend(listed),
            // The controller reads it again, and reports what is wrong.
            Err(_) if has_store => {}
            Err(e) => return Err(e.into()),
        }
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
    Ok(specs)
}

/// The cloud provider to list nodes from (`--cloud-provider`, `--match`), if any.
///
/// An inventory is the site's data, as a nodes file is (see [`node_specs`]):
/// with a store, one that cannot be read or parsed starts the controller,
/// whose listings then fail and say so, until it is fixed.
fn cloud_source(
    args: &RunArgs,
    capacity: Resources,
    has_store: bool,
) -> Result<Option<CloudSource>, RunError> {
    let Some(name) = &args.cloud_provider else {
        return Ok(None);
    };
    let filter =
        anchored(args.node_match.as_deref().unwrap_or(".*")).map_err(|e| flag("--match", e))?;
    let provider: Arc<dyn CloudProvider> =
        match crate::source::provider(name, args.cloud_config.as_deref()) {
            Ok(provider) => provider.into(),
            Err(
                e @ SourceError::CloudConfig {
                    provider: "inventory",
                    ..
                },
            ) => match (&args.cloud_config, has_store) {
                (Some(path), true) => {
                    Arc::new(crate::source::inventory::InventoryProvider::unread(path))
                }
                _ => return Err(e.into()),
            },
            Err(e) => return Err(e.into()),
        };
    Ok(Some(CloudSource {
        provider,
        filter,
        sync_node_list: args.sync_node_list,
        fallback: capacity,
    }))
}

/// How kubelets are probed, and the simulated fleet (`--simulate`), whose
/// kubelets speak plain HTTP; the kubelet credentials are loaded now.
fn probe_config(args: &RunArgs) -> Result<(ProbeConfig, Option<SimulateRequest>), RunError> {
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
    let simulate = args.simulate.map(|nodes| SimulateRequest {
        nodes,
        base_ip: args.simulate_base_ip,
        control: args.simulate_control,
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
    Ok((probe, simulate))
}

/// The cluster's CA for kubelets' client certificates, if configured; a
/// start-up error naming the flag when its files cannot be used.
fn signer(args: &RunArgs) -> Result<Option<Arc<crate::certificates::Signer>>, RunError> {
    match (
        &args.cluster_signing_cert_file,
        &args.cluster_signing_key_file,
    ) {
        (None, None) => Ok(None),
        (Some(cert), Some(key)) => crate::certificates::Signer::load(
            std::path::Path::new(cert),
            std::path::Path::new(key),
            args.cluster_signing_duration,
        )
        .map(|s| Some(Arc::new(s)))
        .map_err(RunError::Serving),
        (Some(_), None) => Err(flag(
            "--cluster-signing-cert-file",
            "needs --cluster-signing-key-file, the CA's private key".into(),
        )),
        (None, Some(_)) => Err(flag(
            "--cluster-signing-key-file",
            "needs --cluster-signing-cert-file, the CA certificate it belongs to".into(),
        )),
    }
}

/// The API's serving TLS and credentials, checked against `--listen`.
type Serving = (Option<Arc<rustls::ServerConfig>>, Credentials);

/// Serving TLS (the certificate and key as a pair), the tokens, the client
/// CA, and the listen policy, with a warning when `--insecure-listen` is
/// what allows it.
fn serving(args: &RunArgs) -> Result<Serving, RunError> {
    let mut credentials = Credentials::default();
    let tls = match (&args.tls_cert_file, &args.tls_private_key_file) {
        (None, None) => None,
        (Some(cert), Some(key)) => {
            let (config, serving) =
                crate::server::serving_tls(cert, key, args.client_ca_file.is_some())
                    .map_err(RunError::Serving)?;
            credentials.serving = Some((cert.into(), key.into(), serving));
            Some(config)
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
    if let Some(path) = &args.token_file {
        let tokens = Tokens::load(path).map_err(RunError::Serving)?;
        credentials.tokens = Some((path.into(), Reloadable::new(tokens)));
    }
    if let Some(path) = &args.client_ca_file {
        if tls.is_none() {
            return Err(flag(
                "--client-ca-file",
                "client certificates come with TLS: give --tls-cert-file and --tls-private-key-file too".into(),
            ));
        }
        // Read once at start-up, before the server runs.
        #[allow(clippy::disallowed_methods)]
        let pem = std::fs::read(path)
            .map_err(|e| RunError::Serving(format!("cannot read --client-ca-file {path}: {e}")))?;
        let ca = ClientCa::parse(&pem, path).map_err(RunError::Serving)?;
        credentials.client_ca = Some((path.into(), Reloadable::new(ca)));
    }
    let authenticated = credentials.authn().required();
    crate::server::check_listen(
        args.listen,
        tls.is_some(),
        authenticated,
        args.insecure_listen,
    )?;
    if args.insecure_listen && (tls.is_none() || !authenticated) {
        tracing::warn!(
            listen = %args.listen,
            tls = tls.is_some(),
            authentication = authenticated,
            "--insecure-listen: the API may be reachable from the network without TLS or authentication"
        );
    }
    Ok((tls, credentials))
}

/// A number of bytes (a quantity such as 512Mi), where 0 stands for no limit.
fn bytes_or_zero(s: &str) -> Result<u64, crate::quantity::QuantityError> {
    match s.trim() {
        "0" => Ok(0),
        given => crate::quantity::parse_memory(given),
    }
}

/// How much history to keep (`--history-retention`, `--history-max-bytes`; 0 keeps all).
fn retention(args: &RunArgs) -> Result<crate::store::RetentionConfig, RunError> {
    Ok(crate::store::RetentionConfig {
        max_age: (!args.history_retention.is_zero()).then_some(args.history_retention),
        max_bytes: match bytes_or_zero(&args.history_max_bytes) {
            Ok(0) => None,
            Ok(bytes) => Some(bytes),
            Err(e) => return Err(flag("--history-max-bytes", e.to_string())),
        },
    })
}

/// The open-file limit, raised, and the API sized inside it for the
/// `static_nodes` and the simulated ones, with a warning when pushing
/// nodes and readers will not all fit.
fn api_sizing(args: &RunArgs, static_nodes: usize) -> Result<(u64, ApiSizing), RunError> {
    if args.request_body_timeout.is_zero() {
        return Err(flag(
            "--request-body-timeout",
            "must be more than zero".into(),
        ));
    }
    let open_files = super::raise_open_file_limit();
    let sim_nodes = args.simulate.unwrap_or(0);
    let known_nodes = static_nodes + sim_nodes;
    let sizing = size_api(SizingInput {
        open_files,
        nodes: known_nodes,
        probed_nodes: match args.node_status_mode {
            crate::controller::StatusMode::Push => 0,
            _ => known_nodes,
        },
        simulated_nodes: sim_nodes,
        max_connections: args.max_connections,
        limits: ApiLimits {
            max_watches: args.max_watches.unwrap_or(ApiLimits::DEFAULT_MAX_WATCHES),
            watches_per_node: match args.max_watches {
                Some(_) => 0,
                None => ApiLimits::WATCHES_PER_NODE,
            },
            max_reads: args.max_requests_inflight,
            max_mutating: args.max_mutating_requests_inflight,
            body_timeout: args.request_body_timeout,
        },
    })?;
    if args.node_status_mode != crate::controller::StatusMode::Probe
        && sizing.max_connections < known_nodes + READER_CONNECTIONS
    {
        tracing::warn!(
            "only {} API connections fit in the open-file limit ({open_files}): {known_nodes} nodes pushing over one connection each, and readers besides, need {}; connections beyond the cap close idle ones (raise ulimit -Hn, or use push mode, which keeps no probe connections)",
            sizing.max_connections,
            known_nodes + READER_CONNECTIONS
        );
    }
    Ok((open_files, sizing))
}

/// `--eviction-mode delete-pods` needs an API server to delete pods on.
fn check_eviction_mode(args: &RunArgs, mirrored: bool) -> Result<(), RunError> {
    if !mirrored && args.eviction_mode == crate::model::EvictionMode::DeletePods {
        return Err(flag(
            "--eviction-mode",
            "delete-pods deletes pods on an API server, and none is configured: give --kubeconfig or --master, or use taint (with an --eviction-hook) when running alone".into(),
        ));
    }
    Ok(())
}

/// `--transition-hook`, its timeout and mode, if the hook is given.
fn transition_hook(
    args: &RunArgs,
    site: Option<&str>,
) -> Result<Option<crate::hook::transitions::TransitionHookConfig>, RunError> {
    match &args.transition_hook {
        None => Ok(None),
        Some(command) if command.trim().is_empty() => Err(flag(
            "--transition-hook",
            "the command is empty; give a command, or leave the flag out".into(),
        )),
        Some(_) if args.transition_hook_timeout.is_zero() => Err(flag(
            "--transition-hook-timeout",
            "must be more than 0, e.g. 30s".into(),
        )),
        Some(command) => Ok(Some(crate::hook::transitions::TransitionHookConfig {
            command: command.clone(),
            timeout: args.transition_hook_timeout,
            mode: args.transition_hook_mode,
            site: site.map(str::to_string),
        })),
    }
}

/// The controller's configuration from its flags and the validated parts.
fn controller_config(
    args: &RunArgs,
    capacity: Resources,
    probe: ProbeConfig,
    cloud: Option<CloudSource>,
) -> ControllerConfig {
    ControllerConfig {
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
        // Followed as it changes on disk.
        nodes_file: args
            .nodes_file
            .as_ref()
            .map(|path| crate::controller::NodesFile {
                path: path.clone(),
                capacity,
            }),
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
    }
}

/// The mirror's configuration, validated; `None` when running alone.
fn mirror_config(args: &RunArgs) -> Result<Option<crate::mirror::MirrorConfig>, RunError> {
    use crate::mirror::{ApiServer, LeaderConfig, MirrorConfig};
    let Some(api_server) = ApiServer::from_flags(
        args.kubeconfig.clone(),
        args.master.clone(),
        args.standalone,
    ) else {
        return Ok(None);
    };
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
            .map_err(|e| flag("--leader-elect-*", e.to_string()))?;
        config.leader = Some(leader);
    }
    Ok(Some(config))
}

/// The API server client's flags, checked whether or not an API server is
/// configured, as kube-controller-manager checks its flags.
fn check_api_server_flags(args: &RunArgs) -> Result<(), RunError> {
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
    Ok(())
}

/// This process in a leader Lease: the host name and a fresh id, as
/// kube-controller-manager does.
fn identity() -> String {
    // Read once while the configuration is validated, before any task runs.
    #[allow(clippy::disallowed_methods)]
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
