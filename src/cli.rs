//! Command-line definitions for every subcommand. Flag names follow
//! kube-controller-manager (and kube-apiserver for kubelet access) where one exists.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum, ValueHint};

use crate::probe::Scheme;

/// The default store path, relative to the working directory.
pub const DEFAULT_DB: &str = "nodekeeper-data";

#[derive(Debug, Parser)]
#[command(
    name = "nodekeeper",
    about = "A standalone node controller for edge and bare-metal sites"
)]
pub struct Cli {
    /// The store (a directory). Inspection commands find a running
    /// controller that holds it by themselves.
    #[arg(long, global = true, env = "NODEKEEPER_DB", default_value = DEFAULT_DB)]
    pub db: PathBuf,

    /// Inspect through this controller's HTTP API instead of the store
    /// (e.g. http://127.0.0.1:8080).
    #[arg(long, global = true, env = "NODEKEEPER_SERVER")]
    pub server: Option<String>,

    /// A bearer token for a controller run with --token-file: every request
    /// but the health checks needs one there, and cordon, label, taint and
    /// delete an operator's (prefer the environment variable: a flag shows
    /// in the process list).
    #[arg(long, global = true, env = "NODEKEEPER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,

    /// Log filter (RUST_LOG syntax), e.g. `debug` or `nodekeeper=debug`.
    #[arg(long, global = true, env = "NODEKEEPER_LOG", default_value = "info")]
    pub log: String,

    /// How log lines look: `text` for people, `json` for log pipelines (one
    /// object a line: time, level, target, message and the event's fields).
    #[arg(long, global = true, env = "NODEKEEPER_LOG_FORMAT", value_enum, default_value_t = crate::logging::LogFormat::Text)]
    pub log_format: crate::logging::LogFormat,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controller.
    Run(Box<RunArgs>),
    /// List nodes (`-o json` is a Kubernetes NodeList).
    Nodes {
        #[arg(short, long, value_enum, default_value_t = NodesFormat::Table)]
        output: NodesFormat,
    },
    /// Show one node in detail, with its history.
    Describe { node: String },
    /// Show the history of condition changes and other events.
    History(HistoryArgs),
    /// Show the registry as it was at TIME (RFC 3339, or an age such as 10m).
    At {
        time: String,
        #[arg(short, long, value_enum, default_value_t = ListFormat::Table)]
        output: ListFormat,
    },
    /// The mirror to the Kubernetes API server.
    Mirror {
        #[command(subcommand)]
        command: MirrorCommand,
    },
    /// Look after the store.
    Db {
        #[command(subcommand)]
        command: DbCommand,
    },
    /// Run simulated kubelets, or change one's health.
    Sim(Box<SimArgs>),
    /// The configuration `run` would use, and where each value comes from.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Serve the web console and the read-only API over a stopped store.
    Ui(UiArgs),
    /// Show the version, git commit, build date and compiler of this binary.
    Version {
        #[arg(short, long, value_enum, default_value_t = ListFormat::Table)]
        output: ListFormat,
    },
    /// Mark a node unschedulable for maintenance (as kubectl cordon); kept in its history.
    Cordon { node: String },
    /// Mark a cordoned node schedulable again.
    Uncordon { node: String },
    /// Set (`KEY=VALUE`) or remove (`KEY-`) a node's labels.
    Label(LabelArgs),
    /// Set (`KEY=VALUE`) or remove (`KEY-`) a node's annotations.
    Annotate(LabelArgs),
    /// Add (`KEY[=VALUE]:EFFECT`) or remove (`KEY[:EFFECT]-`) a node's taints.
    Taint(TaintArgs),
    /// Delete a node that no source lists (its history is kept).
    Delete { node: String },
    /// Bootstrap tokens, with which a new machine's kubelet joins (as
    /// `kubeadm token`): through the running controller (found as the
    /// inspection commands find it), or on the stopped store.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Print a shell completion script: `source <(nodekeeper completions bash)`.
    Completions {
        #[arg(value_enum)]
        shell: Shell,
    },
}

#[derive(Debug, Args)]
/// `nodekeeper ui`'s flags.
pub struct UiArgs {
    /// Address to serve the console and the API on. A non-loopback address
    /// needs --tls-cert-file and --token-file (or --insecure-listen).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Bearer tokens, as for `run --token-file`.
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<String>,
    /// Serve over HTTPS with this certificate (PEM).
    #[arg(long, value_name = "PATH")]
    pub tls_cert_file: Option<String>,
    /// The private key of --tls-cert-file (PEM).
    #[arg(long, value_name = "PATH")]
    pub tls_private_key_file: Option<String>,
    /// Serve a non-loopback --listen address even without TLS or tokens.
    #[arg(long)]
    pub insecure_listen: bool,
    /// sled cache size in bytes.
    #[arg(long, default_value_t = crate::store::DEFAULT_CACHE_CAPACITY)]
    pub cache_capacity: u64,
}

/// The shells completions are made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Debug, Args)]
pub struct LabelArgs {
    pub node: String,
    /// `KEY=VALUE` to set, `KEY-` to remove.
    #[arg(required = true, allow_hyphen_values = true)]
    pub changes: Vec<String>,
    /// Change a key that already has another value.
    #[arg(long)]
    pub overwrite: bool,
}

#[derive(Debug, Args)]
pub struct TaintArgs {
    pub node: String,
    /// `KEY[=VALUE]:EFFECT` to add (NoSchedule, PreferNoSchedule, NoExecute);
    /// `KEY-` or `KEY:EFFECT-` to remove.
    #[arg(required = true, allow_hyphen_values = true)]
    pub changes: Vec<String>,
    /// Replace a taint with the same key and effect.
    #[arg(long)]
    pub overwrite: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NodesFormat {
    Table,
    Wide,
    Json,
    Yaml,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ListFormat {
    Table,
    Json,
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Only this node's events.
    pub node: Option<String>,
    /// Events at or after this time (RFC 3339, or an age such as 1h).
    #[arg(long)]
    pub since: Option<String>,
    /// Events at or before this time.
    #[arg(long)]
    pub until: Option<String>,
    /// Only changes of this condition (e.g. Ready).
    #[arg(long)]
    pub condition: Option<String>,
    #[arg(short, long, value_enum, default_value_t = ListFormat::Table)]
    pub output: ListFormat,
}

#[derive(Debug, Subcommand)]
pub enum MirrorCommand {
    /// Backlog, oldest entry, last error, leadership.
    Status {
        #[arg(short, long, value_enum, default_value_t = ListFormat::Table)]
        output: ListFormat,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the effective configuration of `run` (the same flags and
    /// `--config`) as YAML, each value with where it came from; refused
    /// (exit 2) when a file it names cannot be read.
    Print(Box<RunArgs>),
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a bootstrap token and print it (`ID.SECRET`), for a kubelet's
    /// bootstrap kubeconfig. Needs `run --enable-bootstrap-token-auth`.
    Create {
        /// The token to make (`[a-z0-9]{6}.[a-z0-9]{16}`); a random one without.
        #[arg(value_name = "TOKEN")]
        bootstrap_token: Option<String>,
        /// How long it is valid; 0 for ever.
        #[arg(long, default_value = "24h", value_parser = parse_duration)]
        ttl: Duration,
        /// What it is for, shown by `token list`.
        #[arg(long, default_value = "")]
        description: String,
        /// Extra groups its user is in, each `system:bootstrappers:...`.
        #[arg(long, value_delimiter = ',')]
        groups: Vec<String>,
    },
    /// List the bootstrap tokens, with their expiry.
    List,
    /// Delete bootstrap tokens, by ID or whole token.
    Delete {
        #[arg(required = true)]
        tokens: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum DbCommand {
    /// Schema, counts, sizes, last controller.
    Status,
    /// Read every record; check that the registry agrees with its history.
    Verify,
    /// Write the registry and history as JSON lines.
    Export {
        /// File to write (default: standard output).
        #[arg(long)]
        output: Option<PathBuf>,
        /// The export format to write: this build's (2), or 1 for a release
        /// that reads only that (docs/guide/upgrades.md).
        #[arg(long, value_name = "N", default_value_t = crate::store::EXPORT_FORMAT_VERSION,
              value_parser = clap::value_parser!(u32).range(1..=crate::store::EXPORT_FORMAT_VERSION as i64))]
        format_version: u32,
    },
    /// Back up the store, the running controller's included (found as the
    /// inspection commands find it: `--server`, or the store's discovery
    /// file): a consistent snapshot at one seq, in the export format, while
    /// it goes on writing. The file appears only once whole.
    Backup {
        /// File to write (written as FILE.partial, renamed once complete).
        #[arg(long)]
        output: PathBuf,
    },
    /// Load an export into a new, empty store.
    Import {
        /// File to read (default: standard input).
        #[arg(long)]
        input: Option<PathBuf>,
    },
    /// Rewrite the store compactly (export and import into a fresh one, then swap).
    Compact,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Read settings from this YAML file: the flags below under their own
    /// names (`node-sync-period: 10s`); flags given here win over it.
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub config: Option<PathBuf>,

    /// This site's name, for a fleet of sites: in `nodekeeper_build_info`,
    /// every log line, the console's title, the transition hook's
    /// environment (`NODEKEEPER_SITE`) and `nodekeeper version`. A
    /// Kubernetes label value: up to 63 letters, digits, `-`, `_` and `.`,
    /// beginning and ending with a letter or digit.
    #[arg(long, value_name = "NAME", env = "NODEKEEPER_SITE")]
    pub site: Option<String>,
    /// Label keys `kube_node_labels` carries, as kube-state-metrics' flag
    /// of the same name: `nodes=[KEY,...]` (`nodes=[*]` for all, one `*`
    /// in a key matching any text). Without it, no `kube_node_labels`.
    #[arg(long, value_name = "RESOURCE=[KEY,...]")]
    pub metric_labels_allowlist: Option<String>,
    /// The resources whose kube-state-metrics series are served, as
    /// kube-state-metrics' flag of the same name: its resources, separated
    /// by commas. nodekeeper has nodes only, so a list without `nodes`
    /// (`pods`, say) serves no `kube_node_*` series, for a site whose own
    /// kube-state-metrics makes them. Without it, every resource.
    #[arg(long, value_name = "RESOURCE,...")]
    pub resources: Option<String>,

    /// Address for the HTTP API (nodes, history, metrics). A non-loopback
    /// address needs --tls-cert-file and --token-file (or --insecure-listen).
    #[arg(long, default_value = "127.0.0.1:8080", help_heading = "HTTP API")]
    pub listen: SocketAddr,
    /// Serve the API over HTTPS with this certificate (PEM, leaf first, then intermediates).
    #[arg(long, value_name = "PATH", help_heading = "HTTP API", value_hint = ValueHint::FilePath)]
    pub tls_cert_file: Option<String>,
    /// The private key of --tls-cert-file (PEM).
    #[arg(long, value_name = "PATH", help_heading = "HTTP API", value_hint = ValueHint::FilePath)]
    pub tls_private_key_file: Option<String>,
    /// Bearer tokens, one a line: `TOKEN` (an operator), `TOKEN,NODE` (that
    /// node), or kube-apiserver's `token,user,uid[,"groups"]` (user
    /// system:node:NAME is that node). Every request but the health
    /// checks (/healthz, /livez, /readyz) then needs one, reads included.
    /// Re-read when it changes.
    #[arg(long, value_name = "PATH", help_heading = "HTTP API", value_hint = ValueHint::FilePath)]
    pub token_file: Option<String>,
    /// Authenticate clients by their TLS certificate, verified against
    /// this CA bundle (PEM), as kube-apiserver's flag: the Subject CN is the
    /// user, each O a group (CN=system:node:NAME, O=system:nodes is that
    /// node). Needs --tls-cert-file. Re-read when it changes.
    #[arg(long, value_name = "PATH", help_heading = "HTTP API", value_hint = ValueHint::FilePath)]
    pub client_ca_file: Option<String>,
    /// Serve a non-loopback --listen address even without TLS or tokens.
    #[arg(long, help_heading = "HTTP API")]
    pub insecure_listen: bool,
    /// Also take bootstrap tokens (`ID.SECRET`), as kube-apiserver's flag:
    /// the Secrets `kube-system/bootstrap-token-ID` that `nodekeeper token
    /// create` (or `kubeadm token create`) makes, each user
    /// `system:bootstrap:ID` in `system:bootstrappers`, which may ask for a
    /// kubelet client certificate (a CSR). Needs --token-file.
    #[arg(long, help_heading = "HTTP API")]
    pub enable_bootstrap_token_auth: bool,
    /// The CA certificate (PEM) that signs kubelets' client certificates
    /// from approved CSRs (signer kubernetes.io/kube-apiserver-client-kubelet),
    /// as kube-controller-manager's flag. Without it, approved CSRs stay
    /// unsigned. Needs --cluster-signing-key-file.
    #[arg(long, value_name = "PATH", help_heading = "HTTP API", value_hint = ValueHint::FilePath)]
    pub cluster_signing_cert_file: Option<String>,
    /// The private key (PEM: PKCS#8, RSA or EC) of --cluster-signing-cert-file.
    #[arg(long, value_name = "PATH", help_heading = "HTTP API", value_hint = ValueHint::FilePath)]
    pub cluster_signing_key_file: Option<String>,
    /// The longest validity of an issued client certificate (a CSR's
    /// spec.expirationSeconds may ask for less), as kube-controller-manager's flag.
    #[arg(long, default_value = "8760h", value_name = "DURATION", help_heading = "HTTP API", value_parser = parse_duration)]
    pub cluster_signing_duration: std::time::Duration,
    /// API connections open at once; at the cap, the longest-idle one is
    /// closed for a new client. 0: as many as the open-file limit allows
    /// once probes and the store have theirs.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub max_connections: usize,
    /// Watches streaming at once, a hard cap; more are answered 429
    /// (Retry-After: 1). Unset: 100, and 5 more for each registered node
    /// (a kubelet's watches), counted as each watch is admitted.
    #[arg(long, value_name = "N")]
    pub max_watches: Option<usize>,
    /// Other reads in flight at once; more are answered 429.
    #[arg(long, default_value_t = crate::server::ApiLimits::DEFAULT_MAX_READS, value_name = "N")]
    pub max_requests_inflight: usize,
    /// Writes (heartbeats included) in flight at once; more are answered
    /// 429. 0: every connection not kept for watches, reads and health checks.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub max_mutating_requests_inflight: usize,
    /// How long a request body may take to arrive once its headers have;
    /// a slower one is answered 408 and its connection closed.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub request_body_timeout: Duration,
    /// The bytes a second that lists of nodes share as they go out (a
    /// quantity such as 64Mi), taken in turns chunk by chunk, so readers
    /// listing back to back leave the CPU to heartbeats and small
    /// requests. 0: as fast as clients read.
    #[arg(long, default_value = "64Mi", value_name = "BYTES")]
    pub list_bytes_per_second: String,

    /// Static nodes, comma-separated names or IPs.
    #[arg(long, help_heading = "Nodes and sources")]
    pub nodes: Option<String>,
    /// Static nodes from a file: one per line (`#` comments), or YAML/JSON entries with name, address, labels.
    #[arg(long, help_heading = "Nodes and sources", value_hint = ValueHint::FilePath)]
    pub nodes_file: Option<PathBuf>,
    /// Take nodes from a cloud or inventory provider: inventory, http or ec2.
    #[arg(long, value_name = "NAME", help_heading = "Nodes and sources")]
    pub cloud_provider: Option<String>,
    /// The provider's configuration: for `inventory` the inventory file
    /// itself, for `http` and `ec2` a YAML file (see the README).
    #[arg(long, value_name = "PATH", requires = "cloud_provider", help_heading = "Nodes and sources", value_hint = ValueHint::FilePath)]
    pub cloud_config: Option<PathBuf>,
    /// Only machines whose whole name matches REGEX become nodes (default:
    /// every machine). Matched against the lowercased node name.
    /// kube-controller-manager called it --minion_regexp.
    #[arg(
        long = "match",
        value_name = "REGEX",
        requires = "cloud_provider",
        help_heading = "Nodes and sources"
    )]
    pub node_match: Option<String>,
    /// Keep the registry following the provider every sync period: machines
    /// that appear are registered, nodes whose machines are gone are deleted.
    /// `--sync-node-list=false` registers the first listing only.
    #[arg(long, action = ArgAction::Set, default_value = "true", value_name = "BOOL", help_heading = "Nodes and sources")]
    pub sync_node_list: bool,
    /// CPU capacity of static nodes (and of provider machines that don't say).
    #[arg(long, default_value = "1", help_heading = "Nodes and sources")]
    pub node_cpu: String,
    /// Memory capacity of static nodes (and of provider machines that don't say).
    #[arg(long, default_value = "3Gi", help_heading = "Nodes and sources")]
    pub node_memory: String,

    /// Kubelet port to probe.
    #[arg(long, default_value_t = 10250, help_heading = "Probing")]
    pub kubelet_port: u16,
    /// Kubelet scheme.
    #[arg(long, value_enum, default_value_t = Scheme::Https, help_heading = "Probing")]
    pub kubelet_scheme: Scheme,
    /// Timeout of one kubelet probe.
    #[arg(long, default_value = "5s", value_parser = parse_duration, help_heading = "Probing")]
    pub kubelet_timeout: Duration,
    /// CA bundle that signs kubelet serving certificates.
    #[arg(long, alias = "kubelet-certificate-authority", help_heading = "Probing", value_hint = ValueHint::FilePath)]
    pub kubelet_ca: Option<String>,
    /// Client certificate presented to kubelets.
    #[arg(long, alias = "kubelet-client-certificate", help_heading = "Probing", value_hint = ValueHint::FilePath)]
    pub kubelet_client_cert: Option<String>,
    /// Client key presented to kubelets.
    #[arg(long, help_heading = "Probing", value_hint = ValueHint::FilePath)]
    pub kubelet_client_key: Option<String>,
    /// Bearer token (file) presented to kubelets.
    #[arg(long, help_heading = "Probing", value_hint = ValueHint::FilePath)]
    pub kubelet_token_file: Option<String>,
    /// Do not verify kubelet serving certificates. Anyone on the path can impersonate a kubelet.
    #[arg(long, help_heading = "Probing")]
    pub kubelet_insecure_skip_tls_verify: bool,
    /// Probes in flight at once.
    #[arg(long, default_value_t = 1024, help_heading = "Probing")]
    pub probe_concurrency: usize,

    /// How often nodes are probed.
    #[arg(long, default_value = "10s", value_parser = parse_duration, help_heading = "Probing")]
    pub node_sync_period: Duration,
    /// How long a node may go without a healthy answer before it is Unknown.
    #[arg(long, default_value = "40s", value_parser = parse_duration, help_heading = "Node health and push")]
    pub node_monitor_grace_period: Duration,
    /// How node health is learned: probe kubelets, watch their pushed
    /// heartbeats, or both (pushing nodes are watched, the others probed).
    #[arg(long, value_enum, default_value_t = crate::controller::StatusMode::Hybrid, help_heading = "Node health and push")]
    pub node_status_mode: crate::controller::StatusMode,
    /// How often pushing nodes are checked for silence.
    #[arg(long, default_value = "5s", value_parser = parse_duration, help_heading = "Node health and push")]
    pub node_monitor_period: Duration,
    /// How long a node that never posted status may stay silent (push mode).
    #[arg(long, default_value = "60s", value_parser = parse_duration, help_heading = "Node health and push")]
    pub node_startup_grace_period: Duration,
    /// Let kubelets register their own nodes (POST /api/v1/nodes).
    #[arg(long, help_heading = "Node health and push")]
    pub allow_node_registration: bool,
    /// How long a node may stay not Ready before it is evicted.
    #[arg(long, default_value = "5m", value_parser = parse_duration, help_heading = "Eviction")]
    pub pod_eviction_timeout: Duration,
    /// What eviction does: NoExecute taints, pod deletion (with a mirror), or nothing.
    #[arg(long, value_enum, default_value_t = crate::model::EvictionMode::Taint, help_heading = "Eviction")]
    pub eviction_mode: crate::model::EvictionMode,
    /// A command run (with `sh -c`) for each evicted node, given the node's name and the reason as $1 and $2.
    #[arg(long, help_heading = "Eviction", value_hint = ValueHint::CommandString)]
    pub eviction_hook: Option<String>,
    /// A command run (with `sh -c`) for every condition transition, once, in
    /// order, resumed after a restart: node, condition, from, to, reason and
    /// seq as $1…$6 and NODEKEEPER_* variables, the event as JSON on stdin
    /// (or many at a time: --transition-hook-mode batch).
    #[arg(long, help_heading = "Hooks", value_hint = ValueHint::CommandString)]
    pub transition_hook: Option<String>,
    /// How long one --transition-hook run may take before its process group is killed.
    #[arg(long, default_value = "30s", value_parser = parse_duration, help_heading = "Hooks")]
    pub transition_hook_timeout: Duration,
    /// One --transition-hook run a transition, or one run for all that are
    /// waiting (up to 1,000), one event a line on stdin: a slow hook keeps up
    /// with a burst.
    #[arg(long, value_enum, default_value_t = crate::hook::transitions::TransitionHookMode::Each, help_heading = "Hooks")]
    pub transition_hook_mode: crate::hook::transitions::TransitionHookMode,
    /// Evictions per second in a healthy zone.
    #[arg(long, default_value_t = 0.1, help_heading = "Eviction")]
    pub node_eviction_rate: f64,
    /// Evictions per second in a partially disrupted large zone.
    #[arg(long, default_value_t = 0.01, help_heading = "Eviction")]
    pub secondary_node_eviction_rate: f64,
    /// Share of not Ready nodes (more than 2) that makes a zone partially disrupted.
    #[arg(long, default_value_t = 0.55, help_heading = "Eviction")]
    pub unhealthy_zone_threshold: f64,
    /// Zones up to this size are not evicted at all while partially disrupted.
    #[arg(long, default_value_t = 50, help_heading = "Eviction")]
    pub large_cluster_size_threshold: usize,
    /// Tries at registering a node, one sync period apart, before the failure
    /// is logged and recorded (RegistrationFailed); tries go on after that,
    /// less often (up to a minute apart), until the node is registered.
    #[arg(long, default_value_t = 10, help_heading = "Nodes and sources")]
    pub register_retry_count: u32,

    /// Mirror nodes, status, taints and Leases to the API server of this
    /// kubeconfig (its current context). Inside a pod, the pod's service
    /// account is used when neither this nor --master is given.
    #[arg(long, value_name = "PATH", help_heading = "Mirror to an API server", value_hint = ValueHint::FilePath)]
    pub kubeconfig: Option<PathBuf>,
    /// The API server's address (overrides the kubeconfig's server).
    #[arg(long, value_name = "URL", help_heading = "Mirror to an API server")]
    pub master: Option<String>,
    /// Run without an API server, even inside a pod.
    #[arg(long, conflicts_with_all = ["kubeconfig", "master"], help_heading = "Mirror to an API server")]
    pub standalone: bool,
    /// Requests per second to the API server, sustained [default: sized
    /// from the Ready nodes' Lease renewals, 20 to 1000].
    #[arg(long, value_name = "QPS", help_heading = "Mirror to an API server")]
    pub kube_api_qps: Option<f64>,
    /// Requests to the API server allowed in a burst [default: the larger
    /// of 30 and the QPS].
    #[arg(long, value_name = "N", help_heading = "Mirror to an API server")]
    pub kube_api_burst: Option<u32>,
    /// Time one API server request may take (connect, send, answer).
    #[arg(long, default_value = "10s", value_parser = parse_duration, help_heading = "Mirror to an API server")]
    pub kube_api_timeout: Duration,
    /// `leaseDurationSeconds` of the node Leases written for Ready nodes.
    #[arg(long, default_value = "40s", value_parser = parse_duration, help_heading = "Mirror to an API server")]
    pub node_lease_duration: Duration,
    /// How often a Ready node's Lease is renewed on the API server
    /// [default: a third of --node-lease-duration].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", help_heading = "Mirror to an API server")]
    pub node_lease_renew_interval: Option<Duration>,
    /// Renew the node Leases of Ready nodes on the API server. Keep it on
    /// while anything in the cluster reads them (kube-controller-manager's
    /// node lifecycle controller does); turn it off to save the requests
    /// when nothing does.
    #[arg(long, action = ArgAction::Set, default_value = "true", value_name = "BOOL", help_heading = "Mirror to an API server")]
    pub mirror_leases: bool,
    /// Elect a leader through a Lease before writing to the API server, so
    /// two controllers for one site never write at once.
    #[arg(long, action = ArgAction::Set, default_value = "true", value_name = "BOOL", help_heading = "Mirror to an API server")]
    pub leader_elect: bool,
    /// How long a leader's last renewal holds off the standbys.
    #[arg(long, default_value = "15s", value_parser = parse_duration, help_heading = "Mirror to an API server")]
    pub leader_elect_lease_duration: Duration,
    /// A leader that could not renew for this long stops writing.
    #[arg(long, default_value = "10s", value_parser = parse_duration, help_heading = "Mirror to an API server")]
    pub leader_elect_renew_deadline: Duration,
    /// How often candidates try to acquire or renew the leader Lease.
    #[arg(long, default_value = "2s", value_parser = parse_duration, help_heading = "Mirror to an API server")]
    pub leader_elect_retry_period: Duration,
    /// The leader Lease's name.
    #[arg(
        long,
        default_value = "nodekeeper",
        help_heading = "Mirror to an API server"
    )]
    pub leader_elect_resource_name: String,
    /// The leader Lease's namespace.
    #[arg(
        long,
        default_value = "kube-system",
        help_heading = "Mirror to an API server"
    )]
    pub leader_elect_resource_namespace: String,

    /// sled cache size in bytes (RSS follows it).
    #[arg(long, default_value_t = crate::store::DEFAULT_CACHE_CAPACITY, help_heading = "Store")]
    pub cache_capacity: u64,
    /// How long the history is kept (e.g. 90d, 720h). Older events are
    /// pruned in the background; the registry as of the oldest kept event
    /// stays as a checkpoint, so `at` stays exact. 0 keeps everything.
    #[arg(long, default_value = "90d", value_parser = parse_duration)]
    pub history_retention: Duration,
    /// The most the history may take: its events with their indexes, and
    /// its checkpoints (bytes, or a quantity such as 512Mi or 2Gi). The
    /// oldest go first. 0 is no limit.
    #[arg(long, default_value = "1Gi", value_name = "BYTES")]
    pub history_max_bytes: String,
    /// Events between checkpoints of the registry: `at` and watches replay
    /// at most this many. Default: 5 per node, at least 10000.
    #[arg(long, value_name = "EVENTS", value_parser = clap::value_parser!(u64).range(1..))]
    pub history_checkpoint_interval: Option<u64>,

    /// Take a backup (a consistent snapshot, in the export format) into
    /// this directory every --backup-interval; `/readyz/backup` fails when
    /// the last one is older than twice the interval.
    #[arg(long, value_name = "DIR", help_heading = "Backups", value_hint = ValueHint::DirPath)]
    pub backup_dir: Option<PathBuf>,
    /// Time between scheduled backups.
    #[arg(long, default_value = "1h", value_parser = parse_duration, requires = "backup_dir", help_heading = "Backups")]
    pub backup_interval: Duration,
    /// Scheduled backups kept in --backup-dir; older ones are removed.
    #[arg(
        long,
        default_value_t = 24,
        value_name = "N",
        requires = "backup_dir",
        help_heading = "Backups"
    )]
    pub backup_keep: usize,

    /// Start N simulated kubelets in this process and manage them (the demo).
    #[arg(long, value_name = "N", help_heading = "Demo")]
    pub simulate: Option<usize>,
    /// First loopback address of the simulated kubelets.
    #[arg(
        long,
        default_value = "127.1.0.1",
        requires = "simulate",
        help_heading = "Demo"
    )]
    pub simulate_base_ip: Ipv4Addr,
    /// Control endpoint of the simulated fleet.
    #[arg(
        long,
        default_value = "127.0.0.1:0",
        requires = "simulate",
        help_heading = "Demo"
    )]
    pub simulate_control: SocketAddr,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SimArgs {
    #[command(subcommand)]
    pub command: Option<SimCommand>,
    /// Number of simulated kubelets.
    #[arg(long, default_value_t = 10)]
    pub nodes: usize,
    /// First loopback address; node i listens on base + i.
    #[arg(long, default_value = "127.1.0.1")]
    pub base_ip: Ipv4Addr,
    /// Port every simulated kubelet listens on (0: pick one free port for all).
    #[arg(long, default_value_t = 10250)]
    pub port: u16,
    /// Control endpoint (set a kubelet up, down, sick, hang or slow).
    #[arg(long, default_value = "127.0.0.1:10251")]
    pub control: SocketAddr,
    /// Node name prefix.
    #[arg(long, default_value = "sim-")]
    pub prefix: String,
    /// Write the fleet as a nodes file (for `run --nodes-file`).
    #[arg(long)]
    pub write_nodes_file: Option<PathBuf>,

    /// Also push heartbeats to the controller at URL (e.g.
    /// http://127.0.0.1:8080), as kubelets do: Lease renewals and node status updates.
    #[arg(long, value_name = "URL")]
    pub push: Option<String>,
    /// Time between Lease renewals of each node (kubelet: a quarter of the 40s Lease duration).
    #[arg(long, default_value = "10s", value_parser = parse_duration, requires = "push")]
    pub lease_renew_interval: Duration,
    /// Time between node status updates of each node (kubelet's nodeStatusUpdateFrequency).
    #[arg(long, default_value = "10s", value_parser = parse_duration, requires = "push")]
    pub status_update_interval: Duration,
    /// How far the nodes' clocks are off, e.g. -5h or 3h.
    #[arg(long, default_value = "0", allow_hyphen_values = true, requires = "push",
          value_parser = parse_clock_skew)]
    pub clock_skew: jiff::SignedDuration,
    /// Register nodes the controller does not know (it needs --allow-node-registration).
    #[arg(long, requires = "push")]
    pub register: bool,
    /// Send `Authorization: Bearer` with the first line of this file.
    #[arg(long, value_name = "FILE", requires = "push")]
    pub push_token_file: Option<PathBuf>,
    /// Over https, trust this CA (PEM) for the controller's serving
    /// certificate, as a kubeconfig's certificate-authority.
    #[arg(long, value_name = "FILE", requires = "push")]
    pub push_ca_file: Option<PathBuf>,
    /// Over https, each node authenticates with its own client certificate:
    /// DIR/NAME.pem holds its chain and key, as a kubelet's
    /// kubelet-client-current.pem does.
    #[arg(
        long,
        value_name = "DIR",
        requires = "push",
        conflicts_with = "push_token_file"
    )]
    pub push_cert_dir: Option<PathBuf>,
    /// Over https, each node joins with this bootstrap token (ID.SECRET,
    /// from `nodekeeper token create`), as a kubelet with
    /// --bootstrap-kubeconfig does: a CSR for CN=system:node:NAME, then
    /// its issued client certificate for every call. The controller needs
    /// --enable-bootstrap-token-auth, --client-ca-file naming its signing CA
    /// and --cluster-signing-cert-file/-key-file; it approves the CSRs of
    /// the nodes its source lists (others wait for `kubectl certificate
    /// approve`). A node whose CSR fails tries again 10 s later.
    #[arg(
        long,
        value_name = "TOKEN",
        requires = "push",
        conflicts_with_all = ["push_token_file", "push_cert_dir"]
    )]
    pub bootstrap_token: Option<String>,
    /// Which of a kubelet's calls each node makes: `lean` (register,
    /// Lease renewals, status updates, CSINode) or `all` (also the
    /// reflectors' lists and watches of its node, pods, services,
    /// CSIDrivers and RuntimeClasses, its start events and a mirror pod,
    /// as docs/kubelet-api.md lists them; five more connections a node,
    /// and five watches, which the controller's watch budget grows by for
    /// each registered node unless --max-watches caps it).
    #[arg(long, value_enum, default_value_t = KubeletCalls::Lean, requires = "push")]
    pub kubelet_calls: KubeletCalls,
}

/// Which calls a simulated kubelet makes (`sim --kubelet-calls`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum KubeletCalls {
    /// Registration, Lease renewals, status updates and the CSINode: one
    /// connection a node.
    #[default]
    Lean,
    /// Every call of docs/kubelet-api.md a kubelet makes without pods
    /// from the API: also its watches (one connection each), events and
    /// a mirror pod.
    All,
}

#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Run an in-memory Kubernetes API server (nodes, node status, Leases,
    /// pods) for `run --master` to mirror to: the demo and tests' stand-in.
    Apiserver {
        #[arg(long, default_value = "127.0.0.1:6443")]
        listen: SocketAddr,
    },
    /// Set a simulated kubelet's health: up, down, sick, hang or slow (`all` for every node).
    Set {
        node: String,
        state: String,
        /// The fleet's control endpoint; default: the running controller's in-process fleet, else 127.0.0.1:10251.
        #[arg(long)]
        control: Option<String>,
    },
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    crate::duration::parse(s)
}

/// How far `nodekeeper sim --clock-skew` may set the nodes' clocks off.
pub const MAX_CLOCK_SKEW: jiff::SignedDuration = jiff::SignedDuration::from_hours(24 * 1000);

/// Parses `--clock-skew`: a duration such as `3h` or `-5h30m`.
pub fn parse_clock_skew(s: &str) -> Result<jiff::SignedDuration, String> {
    let text = s.trim();
    let (negative, magnitude) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let d = crate::duration::parse(magnitude)?;
    let d = jiff::SignedDuration::try_from(d).map_err(|_| format!("{s:?} is too long"))?;
    if d > MAX_CLOCK_SKEW {
        return Err(format!("{s:?} is more than 1000 days"));
    }
    Ok(if negative { -d } else { d })
}

#[cfg(test)]
mod tests {
    use jiff::SignedDuration;

    use super::parse_clock_skew;

    #[test]
    fn clock_skew_may_be_negative() {
        assert_eq!(parse_clock_skew("-5h"), Ok(SignedDuration::from_hours(-5)));
        assert_eq!(parse_clock_skew("3h"), Ok(SignedDuration::from_hours(3)));
        assert_eq!(parse_clock_skew("+90s"), Ok(SignedDuration::from_secs(90)));
        assert_eq!(
            parse_clock_skew("-1h30m"),
            Ok(SignedDuration::from_mins(-90))
        );
        assert_eq!(parse_clock_skew("0"), Ok(SignedDuration::ZERO));
        assert!(parse_clock_skew("-").is_err());
        assert!(parse_clock_skew("--5h").is_err());
        assert!(parse_clock_skew("5").is_err());
        assert!(parse_clock_skew("1001d").unwrap_err().contains("1000 days"));
    }
}
