//! Simulated kubelets that push, as real ones do to an API server: each node
//! creates and renews its Lease, patches its node status, and registers itself
//! when asked and unknown.
//!
//! Every node is one task that holds its own kept-alive connection to the
//! controller, opened from the node's own address when the controller is on
//! loopback, as each real kubelet holds its own; no connection is shared with
//! another node. Lease renewals and status updates are started at
//! `i * interval / N` so a large fleet pushes evenly instead of in bursts, and
//! a change of the node's state is reported at once. A node pushes while
//! `up`, `slow` or `sick` (Ready=False); a `down` or `hang` kubelet pushes
//! nothing. Bodies are written as JSON by hand, and the Lease and the
//! registration sent in protobuf, as a kubelet sends its creates and
//! updates (`protobuf`); a strategic-merge patch stays JSON. What goes
//! into a status patch (the kubelet's four conditions, as a two-way diff
//! against the node it last saw) is `node_status`.
//!
//! With `--kubelet-calls all` each node also makes the rest of a
//! kubelet's calls (reflectors, events, a mirror pod): `kubelet_calls`.
//!
//! This file (about 1,000 lines) is over the ~600 the project aims for: one
//! simulated kubelet is its schedule, its one connection (`Link`: connect,
//! TLS, handshake, send, read, reconnect) and the bodies it sends, and they
//! are read together when a push misbehaves; `Link` is the part that would
//! move out first.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST, USER_AGENT};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use jiff::{SignedDuration, Timestamp};
use rustls::pki_types::ServerName;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::net::TcpSocket;
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::kubelet::Node;
use super::KubeletState;
use crate::protobuf::{self, PROTOBUF};
use change_timing::ChangeTimer;
pub use change_timing::{ChangeTiming, Percentiles};
pub use kubelet_calls::REFLECTOR_CONNECTIONS;
use kubelet_calls::{CallKind, StartCalls};
use node_status::NodeStatus;
pub use nodekeeper::cli::KubeletCalls;

mod change_timing;
mod kubelet_calls;
mod node_status;
pub(crate) use node_status::kubelet_report;

/// kubelet's default for both intervals (nodeStatusUpdateFrequency, and a
/// quarter of the 40s Lease duration).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);
/// What kubelets write into `spec.leaseDurationSeconds`.
pub const LEASE_DURATION_SECONDS: i32 = 40;
/// A clock further off than this is a typo, and would leave jiff's range.
/// Answers are small Statuses or objects; the rest is not read.
const MAX_ANSWER: usize = 64 * 1024;
/// How often the counters are logged.
const REPORT_EVERY: Duration = Duration::from_secs(10);

const LEASES_PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
const NODES_PATH: &str = "/api/v1/nodes";
const CSINODES_PATH: &str = "/apis/storage.k8s.io/v1/csinodes";
/// What a kubelet accepts (`cmd/kubelet/app/server.go:1221`): answers in
/// either encoding; nodekeeper answers JSON.
const KUBELET_ACCEPT: &str = "application/vnd.kubernetes.protobuf,application/json";
const STRATEGIC_MERGE: &str = "application/strategic-merge-patch+json";
pub(crate) const SIM_KUBELET_VERSION: &str =
    concat!("v1.33.0-nodekeeper-sim.", env!("CARGO_PKG_VERSION"));
const SIM_USER_AGENT: &str = concat!("nodekeeper-sim/", env!("CARGO_PKG_VERSION"));

/// How a fleet pushes to a controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushConfig {
    /// The controller's API, e.g. `http://127.0.0.1:8080`.
    pub url: String,
    /// Time between Lease renewals of one node.
    pub lease_renew_interval: Duration,
    /// Time between node status updates of one node.
    pub status_update_interval: Duration,
    /// How far the nodes' clocks are off (either way); shows in the times they write.
    pub clock_skew: SignedDuration,
    /// Register a node the controller answers 404 for (`POST /api/v1/nodes`).
    pub register: bool,
    /// Sent as `Authorization: Bearer ...` with every request.
    pub token: Option<BearerToken>,
    /// Limit on opening a connection.
    pub connect_timeout: Duration,
    /// Limit on one whole request, answer included.
    pub request_timeout: Duration,
    /// Over `https`, trust this CA (PEM) for the controller's serving
    /// certificate instead of the platform's roots.
    pub server_ca: Option<String>,
    /// Over `https`, each node proves who it is with its own client
    /// certificate, as a kubelet's kubeconfig does (`client-certificate-data`),
    /// instead of a bearer token.
    pub client_certs: Option<ClientCerts>,
    /// Which of a kubelet's calls each node makes (`kubelet_calls`).
    pub kubelet_calls: KubeletCalls,
    /// Over `https`, each node first joins with this bootstrap token, as a
    /// kubelet with `--bootstrap-kubeconfig` does: a CSR for its client
    /// certificate ([`crate::bootstrap::load_client_cert`]), then that
    /// certificate for every call. Not with `token` or `client_certs`.
    pub bootstrap_token: Option<BearerToken>,
}

/// A node's client certificate chain (leaf first) and key.
pub type NodeCert = (
    Vec<rustls::pki_types::CertificateDer<'static>>,
    rustls::pki_types::PrivateKeyDer<'static>,
);

/// Where each node's client certificate comes from: given the node's name,
/// its chain and key (typically `CN=system:node:NAME, O=system:nodes`
/// issued by the controller's `--client-ca-file` CA).
#[derive(Clone)]
pub struct ClientCerts(pub Arc<CertSource>);

/// Given a node's name, its client certificate chain and key.
pub type CertSource = dyn Fn(&str) -> Result<NodeCert, String> + Send + Sync;

impl fmt::Debug for ClientCerts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClientCerts")
    }
}

impl PartialEq for ClientCerts {
    fn eq(&self, other: &ClientCerts) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ClientCerts {}

impl PushConfig {
    /// kubelet's defaults, pushing to `url`.
    pub fn new(url: impl Into<String>) -> PushConfig {
        PushConfig {
            url: url.into(),
            lease_renew_interval: DEFAULT_INTERVAL,
            status_update_interval: DEFAULT_INTERVAL,
            clock_skew: SignedDuration::ZERO,
            register: false,
            token: None,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            server_ca: None,
            client_certs: None,
            kubelet_calls: KubeletCalls::Lean,
            bootstrap_token: None,
        }
    }

    /// Checks every field; the CLI calls this before anything is bound.
    pub fn validate(&self) -> Result<(), PushSetupError> {
        Endpoint::parse(&self.url)?;
        for (flag, d) in [
            ("--lease-renew-interval", self.lease_renew_interval),
            ("--status-update-interval", self.status_update_interval),
            ("connect timeout", self.connect_timeout),
            ("request timeout", self.request_timeout),
        ] {
            if d.is_zero() {
                return Err(PushSetupError::Zero { what: flag });
            }
        }
        if self.clock_skew.abs() > nodekeeper::cli::MAX_CLOCK_SKEW {
            return Err(PushSetupError::ClockSkew(self.clock_skew));
        }
        if self.bootstrap_token.is_some() {
            if !self.url.starts_with("https://") {
                return Err(PushSetupError::NeedsHttps {
                    flag: "--bootstrap-token",
                });
            }
            if self.token.is_some() || self.client_certs.is_some() {
                return Err(PushSetupError::BootstrapAndCredentials);
            }
        }
        Ok(())
    }
}

/// A bearer token; its `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken(String);

impl BearerToken {
    /// The token; `None` if empty.
    pub fn new(token: impl Into<String>) -> Option<BearerToken> {
        let token = token.into();
        (!token.trim().is_empty()).then(|| BearerToken(token.trim().to_owned()))
    }

    /// The first line of `path`, as `--push-token-file` reads it.
    pub fn from_file(path: &Path) -> Result<BearerToken, PushSetupError> {
        // Read once while `sim` checks its flags, before the fleet starts.
        #[allow(clippy::disallowed_methods)]
        let text = std::fs::read_to_string(path).map_err(|source| PushSetupError::TokenFile {
            path: path.to_owned(),
            source,
        })?;
        BearerToken::new(text.lines().next().unwrap_or_default()).ok_or_else(|| {
            PushSetupError::EmptyToken {
                path: path.to_owned(),
            }
        })
    }
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerToken(<redacted>)")
    }
}

/// Why pushing cannot start.
#[derive(Debug, thiserror::Error)]
pub enum PushSetupError {
    #[error("--push {url:?}: {reason}; give the controller's API as http://HOST:PORT")]
    BadUrl { url: String, reason: String },
    #[error("{what} must be more than zero")]
    Zero { what: &'static str },
    #[error("--clock-skew {0:#} is more than 1000 days either way")]
    ClockSkew(SignedDuration),
    #[error("cannot read --push-token-file {}: {source}", .path.display())]
    TokenFile { path: PathBuf, source: io::Error },
    #[error("--push-token-file {}: the first line must be the bearer token, and is empty", .path.display())]
    EmptyToken { path: PathBuf },
    #[error("the bearer token cannot be sent as an HTTP header (it holds control characters)")]
    BadToken,
    #[error("--push {url:?}: cannot find the address of {host}: {reason}")]
    Resolve {
        url: String,
        host: String,
        reason: String,
    },
    #[error("cannot set up TLS for pushing to {url}: {reason}")]
    Tls { url: String, reason: String },
    #[error("the fleet already pushes")]
    AlreadyPushing,
    #[error("cannot read --push-ca-file {}: {source}", .path.display())]
    CaFile { path: PathBuf, source: io::Error },
    #[error("--push-cert-dir {}: not a directory; give the directory that holds each node's NAME.pem", .path.display())]
    CertDir { path: PathBuf },
    #[error("{flag} is for https; give --push as https://HOST:PORT")]
    NeedsHttps { flag: &'static str },
    #[error(
        "--bootstrap-token gives each node the client certificate it then uses; leave out \
         --push-token-file and --push-cert-dir"
    )]
    BootstrapAndCredentials,
}

impl ClientCerts {
    /// Each node's chain and key from `dir/NAME.pem` (certificates, then
    /// or before the key, in PEM), read when the node first connects, as a
    /// kubelet reads its kubelet-client-current.pem
    /// (client-go `util/certificate/certificate_store.go`).
    pub fn from_dir(dir: &Path) -> Result<ClientCerts, PushSetupError> {
        if !dir.is_dir() {
            return Err(PushSetupError::CertDir {
                path: dir.to_owned(),
            });
        }
        let dir = dir.to_owned();
        Ok(ClientCerts(Arc::new(move |name: &str| {
            use rustls::pki_types::pem::PemObject;
            use rustls::pki_types::{CertificateDer, PrivateKeyDer};
            let path = dir.join(format!("{name}.pem"));
            // Once per node, when its task first connects: a file of about
            // a kilobyte, as a kubelet reads its own at start.
            #[allow(clippy::disallowed_methods)]
            let pem = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let chain = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("{}: {e}", path.display()))?;
            if chain.is_empty() {
                return Err(format!("{}: no certificate in it", path.display()));
            }
            let key = PrivateKeyDer::from_pem_slice(&pem)
                .map_err(|e| format!("{}: no private key in it ({e})", path.display()))?;
            Ok((chain, key))
        })))
    }
}

/// Where the pushes go: the parts of the `--push` URL, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Endpoint {
    https: bool,
    host: String,
    port: u16,
    /// The URL's path without a trailing slash ("" for none): requests go below it.
    prefix: String,
}

impl Endpoint {
    fn parse(url: &str) -> Result<Endpoint, PushSetupError> {
        let bad = |reason: &str| PushSetupError::BadUrl {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let parsed = reqwest::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
        let https = match parsed.scheme() {
            "http" => false,
            "https" => true,
            _ => return Err(bad("the scheme must be http or https")),
        };
        let host = match parsed.host_str() {
            // An IPv6 literal comes bracketed, as it is written in the URL.
            Some(h) if !h.is_empty() => h.trim_start_matches('[').trim_end_matches(']').to_owned(),
            _ => return Err(bad("no host")),
        };
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(bad("a base URL has no query or fragment"));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(bad("credentials go in --push-token-file, not in the URL"));
        }
        Ok(Endpoint {
            https,
            port: parsed.port_or_known_default().unwrap_or(80),
            host,
            prefix: parsed.path().trim_end_matches('/').to_owned(),
        })
    }

    /// The `Host` header.
    fn authority(&self) -> String {
        let default = if self.https { 443 } else { 80 };
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == default {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// What the fleet pushed so far, for the control endpoint and logs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushStats {
    /// Requests sent, whatever came of them.
    pub sent: u64,
    /// Requests without a successful answer (no answer, or refused).
    pub failed: u64,
    /// Of `failed`, those the controller answered with an error status.
    #[serde(default)]
    pub refused: u64,
    /// Lease creations and renewals accepted.
    pub leases: u64,
    /// Node status updates accepted.
    pub statuses: u64,
    /// Nodes registered by the fleet.
    pub registrations: u64,
    /// Nodes whose CSINode is initialised (found, or created).
    #[serde(default)]
    pub csinodes: u64,
    /// Connections opened to the controller (one per node while they stay up).
    #[serde(default)]
    pub connections: u64,
    /// Changes of a node's state reported and accepted.
    #[serde(default)]
    pub changes: u64,
    /// The longest time from a node's change of state to the accepted
    /// status update that reported it, in milliseconds.
    #[serde(default)]
    pub change_latency_max_ms: u64,
    /// How the last change of state asked of the fleet was answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_change: Option<ChangeTiming>,
    /// How the last reconnect asked of the fleet (`FleetHandle::reconnect`)
    /// was answered: each pushing node owes one heartbeat answered on its
    /// new connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reconnect: Option<ChangeTiming>,
    /// The newest failure, as `METHOD path: what happened`.
    pub last_error: Option<String>,
    /// With `--kubelet-calls all`: the answers, by call kind ("pods list",
    /// "pods watch", "event", "mirror pod", ...; `kubelet_calls`), that a
    /// kubelet takes as success.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub calls: std::collections::BTreeMap<String, u64>,
    /// Answers a kubelet would log or retry: an error status (not those it
    /// takes as normal: 409 on a create that exists, 404 on a first get,
    /// 410 on a watch, which relists) or a watch stream that breaks.
    #[serde(default)]
    pub call_errors: u64,
    /// The newest of `call_errors`, as `METHOD path: what happened`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_call_error: Option<String>,
    /// How long answered requests took, from sending to the whole answer,
    /// as counts by bucket of [`crate::latency`].
    #[serde(default)]
    pub latency: Vec<u64>,
    /// Nodes that joined by bootstrap token: their certificate issued.
    #[serde(default)]
    pub bootstraps: u64,
}

#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    failed: AtomicU64,
    refused: AtomicU64,
    leases: AtomicU64,
    statuses: AtomicU64,
    registrations: AtomicU64,
    csinodes: AtomicU64,
    connections: AtomicU64,
    changes: AtomicU64,
    change_latency_max_ms: AtomicU64,
    last_error: Mutex<Option<String>>,
    latency: crate::latency::Histogram,
    calls: [AtomicU64; CallKind::ALL.len()],
    call_errors: AtomicU64,
    last_call_error: Mutex<Option<String>>,
    bootstraps: AtomicU64,
}

/// What every node's pushing shares: configuration, where to connect, counters.
pub(super) struct Pusher {
    endpoint: Endpoint,
    /// The controller's address, looked up once.
    address: SocketAddr,
    /// The `Host` header.
    authority: HeaderValue,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    config: PushConfig,
    authorization: Option<HeaderValue>,
    counters: Counters,
    /// The last change of state requested, and its answers.
    change_timer: ChangeTimer,
    /// The last reconnect requested (its time, sent to every node's task),
    /// and its answers.
    reconnect: tokio::sync::watch::Sender<Option<Instant>>,
    reconnect_timer: ChangeTimer,
    warned_unknown: AtomicBool,
    warned_refused: AtomicBool,
    /// Connection tasks run here, so the fleet waits for them on stop.
    tracker: TaskTracker,
    shutdown: CancellationToken,
    /// With a bootstrap token: the client that joins with it, and each
    /// node's certificate once issued, for all of the node's connections.
    bootstrap: Option<(reqwest::Client, Mutex<HashMap<String, NodeCert>>)>,
}

impl fmt::Debug for Pusher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pusher")
            .field("url", &self.config.url)
            .finish()
    }
}

/// Starts pushing for every node (one task and one connection each,
/// spread over the intervals) plus the logger of the counters. All stop with
/// `shutdown`.
pub(super) fn start(
    config: PushConfig,
    nodes: &[Arc<Node>],
    tracker: &TaskTracker,
    shutdown: CancellationToken,
) -> Result<Arc<Pusher>, PushSetupError> {
    config.validate()?;
    let pusher = Arc::new(Pusher::new(config, tracker.clone(), shutdown)?);
    let now = Instant::now();
    let lease = pusher.config.lease_renew_interval;
    let status = pusher.config.status_update_interval;
    for (i, node) in nodes.iter().enumerate() {
        let first_lease = now + start_offset(i, nodes.len(), lease);
        // A kubelet's status loop does not run in step with its Lease loop.
        let first_status = now + start_offset(i, nodes.len(), status) + status / 2;
        tracker.spawn(node_loop(
            pusher.clone(),
            node.clone(),
            first_lease,
            first_status,
        ));
    }
    tracker.spawn(report_loop(pusher.clone()));
    tracing::info!(
        url = %pusher.config.url,
        nodes = nodes.len(),
        lease_renew_interval = ?lease,
        status_update_interval = ?status,
        clock_skew = %format_args!("{:#}", pusher.config.clock_skew),
        register = pusher.config.register,
        kubelet_calls = ?pusher.config.kubelet_calls,
        connections_each = match pusher.config.kubelet_calls {
            KubeletCalls::Lean => 1,
            KubeletCalls::All => 1 + REFLECTOR_CONNECTIONS,
        },
        "simulated kubelets push, over connections of their own"
    );
    Ok(pusher)
}

/// When node `index` of `nodes` first pushes, after the start: spread evenly over one interval.
fn start_offset(index: usize, nodes: usize, interval: Duration) -> Duration {
    let nanos = interval.as_nanos() * index as u128 / nodes.max(1) as u128;
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// How long a kubelet waits for its bootstrap certificate
/// (kubernetes `pkg/kubelet/certificate/bootstrap/bootstrap.go:355`).
const BOOTSTRAP_TIMEOUT: Duration = Duration::from_secs(3600);
/// After a failed bootstrap the kubelet exits; its service manager starts
/// it again (kubeadm's kubelet unit: `RestartSec=10`).
const BOOTSTRAP_RETRY: Duration = Duration::from_secs(10);

/// With a bootstrap token, joins as a kubelet with `--bootstrap-kubeconfig`
/// does (`bootstrap.go` `LoadClientCert`, [`crate::bootstrap`]): its CSR,
/// then its certificate, kept for all of the node's connections. Tried
/// again after [`BOOTSTRAP_RETRY`] while it fails (each failure counted as
/// an error a kubelet logs). True once joined (at once without a token);
/// false when the fleet stops first.
async fn join(pusher: &Pusher, node: &Node) -> bool {
    let (Some((client, issued)), Some(BearerToken(token))) =
        (&pusher.bootstrap, &pusher.config.bootstrap_token)
    else {
        return true;
    };
    let server = pusher.config.url.trim_end_matches('/');
    loop {
        let attempt = crate::bootstrap::load_client_cert(
            client,
            server,
            Some(token),
            &node.name,
            BOOTSTRAP_TIMEOUT,
            |_| {},
        );
        let outcome = tokio::select! {
            _ = pusher.shutdown.cancelled() => return false,
            outcome = attempt => outcome,
        };
        let cert = outcome
            .map_err(|e| e.to_string())
            .and_then(|joined| node_cert(&joined.cert_pem, &joined.key_pem));
        match cert {
            Ok(cert) => {
                issued
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(node.name.clone(), cert);
                pusher.counters.bootstraps.fetch_add(1, Ordering::Relaxed);
                return true;
            }
            Err(e) => {
                let text = format!("bootstrap of {}: {e}", node.name);
                pusher.call_error(text.clone());
                pusher.failed(text);
            }
        }
        tokio::select! {
            _ = pusher.shutdown.cancelled() => return false,
            _ = tokio::time::sleep(BOOTSTRAP_RETRY) => {}
        }
    }
}

/// A certificate chain and its key, from PEM.
fn node_cert(cert_pem: &str, key_pem: &str) -> Result<NodeCert, String> {
    use rustls::pki_types::pem::PemObject;
    let chain = rustls::pki_types::CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the issued certificate is not PEM: {e}"))?;
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| format!("the key is not PEM: {e}"))?;
    Ok((chain, key))
}

/// The client a fleet joins with: the controller's CA trusted as for pushing.
fn bootstrap_client(config: &PushConfig) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(config.connect_timeout)
        .user_agent(SIM_USER_AGENT);
    if let Some(pem) = &config.server_ca {
        let roots = reqwest::Certificate::from_pem_bundle(pem.as_bytes())
            .map_err(|e| format!("the server CA is not PEM: {e}"))?;
        builder = builder.tls_certs_only(roots);
    }
    builder.build().map_err(|e| e.to_string())
}

/// A ticker that, when a push overran its slot, waits a full interval after it.
fn ticks(first: Instant, period: Duration) -> Interval {
    let mut ticks = tokio::time::interval_at(first, period);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticks
}

/// Whether a kubelet in `state` talks to the API server at all.
pub(super) fn pushes(state: KubeletState) -> bool {
    !matches!(state, KubeletState::Down | KubeletState::Hang)
}

/// One node's kubelet: renews its Lease and updates its status every
/// interval, and reports a change of state at once, over its own connection.
async fn node_loop(
    pusher: Arc<Pusher>,
    node: Arc<Node>,
    first_lease: Instant,
    first_status: Instant,
) {
    let mut status = NodeStatus::new(node_info(&node.name, &uuid::Uuid::new_v4().to_string()));
    let mut link = Link::new(&pusher, &node);
    let mut lease_ticks = ticks(first_lease, pusher.config.lease_renew_interval);
    let mut status_ticks = ticks(first_status, pusher.config.status_update_interval);
    let mut state = node.state.subscribe();
    state.mark_unchanged();
    let mut reconnects = pusher.reconnect.subscribe();
    reconnects.mark_unchanged();
    // When a reconnect was noticed, until a heartbeat on the new connection is answered.
    let mut reconnected_at: Option<Instant> = None;
    let mut lease_created = false;
    let mut csinode_ready = false;
    // A kubelet with a bootstrap kubeconfig has its certificate before
    // anything else (kubernetes `cmd/kubelet/app/server.go` `run`).
    if !join(&pusher, &node).await {
        return;
    }
    let all_calls = pusher.config.kubelet_calls == KubeletCalls::All;
    let mut start_calls = StartCalls::default();
    if all_calls {
        kubelet_calls::start_reflectors(&pusher, &node);
    }
    // When the state last changed, until a status update reports it.
    let mut changed_at: Option<Instant> = None;
    // Ends on shutdown; each turn is one renewal, one update, or one change.
    loop {
        let renew = tokio::select! {
            biased;
            _ = pusher.shutdown.cancelled() => return,
            changed = state.changed() => {
                if changed.is_err() {
                    return;
                }
                changed_at = Some(Instant::now());
                false
            }
            changed = reconnects.changed() => {
                if changed.is_err() {
                    return;
                }
                link.disconnect();
                reconnected_at = Some(Instant::now());
                // At once, on a new connection.
                true
            }
            _ = status_ticks.tick() => false,
            _ = lease_ticks.tick() => true,
        };
        let current = *state.borrow_and_update();
        if !pushes(current) {
            // A kubelet that comes back reads its node afresh: what it saw
            // before is stale by then.
            status.forget();
            reconnected_at = None;
            continue;
        }
        if renew {
            if link.renew_lease(&mut lease_created).await {
                if let Some(noticed) = reconnected_at.take() {
                    pusher.reconnect_timer.answered(noticed, Instant::now());
                }
            }
            continue;
        }
        if link.update_status(&mut status, current).await {
            if let Some(noticed) = changed_at.take() {
                pusher.change_reported(noticed);
            }
            if let Some(noticed) = reconnected_at.take() {
                pusher.reconnect_timer.answered(noticed, Instant::now());
            }
            if all_calls {
                start_calls.events(&mut link, current).await;
            }
            // Once its node exists, as the kubelet's CSI plugin retries
            // until it does (see `Link::init_csinode`).
            if !csinode_ready {
                csinode_ready = link.init_csinode().await;
            }
            if all_calls && csinode_ready {
                start_calls.mirror_pod(&mut link).await;
            }
        }
    }
}

async fn report_loop(pusher: Arc<Pusher>) {
    let mut ticks = ticks(Instant::now() + REPORT_EVERY, REPORT_EVERY);
    // Ends on shutdown.
    loop {
        tokio::select! {
            biased;
            _ = pusher.shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let s = pusher.stats();
        tracing::info!(
            sent = s.sent,
            failed = s.failed,
            refused = s.refused,
            leases = s.leases,
            statuses = s.statuses,
            registrations = s.registrations,
            connections = s.connections,
            call_errors = s.call_errors,
            last_error = s.last_error.as_deref().unwrap_or("none"),
            "simulated kubelet pushes so far"
        );
    }
}

/// Why an exchange failed.
enum Failure {
    /// The connection closed before the server answered anything: it
    /// never took the request up (an idle connection closed under it).
    NotTaken(String),
    Other(String),
}

/// The end of one request.
enum Sent {
    Answered(Answer),
    /// No answer: the message says why.
    Failed(String),
    /// The fleet is shutting down.
    Stopped,
}

struct Answer {
    method: Method,
    path: String,
    status: StatusCode,
    body: Bytes,
}

impl Answer {
    /// `METHOD path: 404 Not Found: nodes "x" not found`, from a Status body when there is one.
    fn describe(&self) -> String {
        let message = serde_json::from_slice::<Value>(&self.body)
            .ok()
            .and_then(|v| v["message"].as_str().map(str::to_owned))
            .unwrap_or_else(|| {
                let text = String::from_utf8_lossy(&self.body);
                text.trim().chars().take(200).collect()
            });
        format!("{} {}: {}: {message}", self.method, self.path, self.status)
    }
}

impl Pusher {
    fn new(
        config: PushConfig,
        tracker: TaskTracker,
        shutdown: CancellationToken,
    ) -> Result<Pusher, PushSetupError> {
        nodekeeper::install_crypto_provider();
        let endpoint = Endpoint::parse(&config.url)?;
        let address = (endpoint.host.as_str(), endpoint.port)
            .to_socket_addrs()
            .map_err(|e| e.to_string())
            .and_then(|mut found| found.next().ok_or_else(|| "no address".to_owned()))
            .map_err(|reason| PushSetupError::Resolve {
                url: config.url.clone(),
                host: endpoint.host.clone(),
                reason,
            })?;
        let authority =
            HeaderValue::from_str(&endpoint.authority()).map_err(|e| PushSetupError::BadUrl {
                url: config.url.clone(),
                reason: e.to_string(),
            })?;
        let tls = if endpoint.https {
            Some(
                tls_connector(&endpoint, config.server_ca.as_deref(), None).map_err(|reason| {
                    PushSetupError::Tls {
                        url: config.url.clone(),
                        reason,
                    }
                })?,
            )
        } else {
            None
        };
        let bootstrap = match &config.bootstrap_token {
            None => None,
            Some(_) => Some((
                bootstrap_client(&config).map_err(|reason| PushSetupError::Tls {
                    url: config.url.clone(),
                    reason,
                })?,
                Mutex::default(),
            )),
        };
        let authorization = match &config.token {
            None => None,
            Some(BearerToken(token)) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
                    .map_err(|_| PushSetupError::BadToken)?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        Ok(Pusher {
            endpoint,
            address,
            authority,
            tls,
            config,
            authorization,
            counters: Counters::default(),
            change_timer: ChangeTimer::default(),
            reconnect: tokio::sync::watch::Sender::new(None),
            reconnect_timer: ChangeTimer::default(),
            warned_unknown: AtomicBool::new(false),
            warned_refused: AtomicBool::new(false),
            tracker,
            shutdown,
            bootstrap,
        })
    }

    /// The counters so far.
    pub(super) fn stats(&self) -> PushStats {
        let c = &self.counters;
        PushStats {
            sent: c.sent.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            leases: c.leases.load(Ordering::Relaxed),
            statuses: c.statuses.load(Ordering::Relaxed),
            registrations: c.registrations.load(Ordering::Relaxed),
            csinodes: c.csinodes.load(Ordering::Relaxed),
            connections: c.connections.load(Ordering::Relaxed),
            changes: c.changes.load(Ordering::Relaxed),
            change_latency_max_ms: c.change_latency_max_ms.load(Ordering::Relaxed),
            last_change: self.change_timer.timing(),
            last_reconnect: self.reconnect_timer.timing(),
            last_error: c
                .last_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            latency: c.latency.counts(),
            calls: CallKind::ALL
                .iter()
                .map(|k| {
                    (
                        k.name().to_owned(),
                        c.calls[*k as usize].load(Ordering::Relaxed),
                    )
                })
                .filter(|(_, n)| *n > 0)
                .collect(),
            call_errors: c.call_errors.load(Ordering::Relaxed),
            bootstraps: c.bootstraps.load(Ordering::Relaxed),
            last_call_error: c
                .last_call_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }

    /// The simulated node's own clock.
    fn node_now(&self) -> Timestamp {
        let now = nodekeeper::model::Micros::now().timestamp();
        // Validated to stay far inside jiff's range.
        now.checked_add(self.config.clock_skew).unwrap_or(now)
    }

    fn failed(&self, message: String) {
        tracing::debug!(error = %message, "simulated kubelet push failed");
        self.counters.failed.fetch_add(1, Ordering::Relaxed);
        *self
            .counters
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(message);
    }

    /// A request the controller answered with an error status.
    fn refused(&self, answer: &Answer) {
        self.counters.refused.fetch_add(1, Ordering::Relaxed);
        let text = answer.describe();
        self.call_error(text.clone());
        self.failed(text);
    }

    /// An answer a kubelet would log or retry (`PushStats::call_errors`).
    fn call_error(&self, text: String) {
        self.counters.call_errors.fetch_add(1, Ordering::Relaxed);
        *self
            .counters
            .last_call_error
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(text);
    }

    /// A call of `kind` answered as a kubelet wants it.
    fn answered(&self, kind: CallKind) {
        self.counters.calls[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// A change of state noticed at `noticed` was reported by an accepted status update just now.
    fn change_reported(&self, noticed: Instant) {
        let now = Instant::now();
        let c = &self.counters;
        c.changes.fetch_add(1, Ordering::Relaxed);
        let ms =
            u64::try_from(now.saturating_duration_since(noticed).as_millis()).unwrap_or(u64::MAX);
        c.change_latency_max_ms.fetch_max(ms, Ordering::Relaxed);
        self.change_timer.answered(noticed, now);
    }

    /// A change of state is requested at `at`, before any node is set.
    pub(super) fn change_requested(&self, at: Instant) {
        self.change_timer.requested(at);
    }

    /// Every node drops its connection at once and renews its Lease on a new
    /// one, as kubelets do when their API server restarts or a load balancer
    /// drops them; `pushing` of them (those in a state that pushes) each owe
    /// a heartbeat answered on the new connection, timed from `at`.
    pub(super) fn reconnect(&self, at: Instant, pushing: u64) {
        self.reconnect_timer.requested(at);
        self.reconnect_timer.expect(at, pushing);
        self.reconnect.send_replace(Some(at));
    }

    /// The change requested at `at` has moved `nodes` nodes into `state`;
    /// those that push in it each owe an answer.
    pub(super) fn change_made(&self, at: Instant, state: KubeletState, nodes: u64) {
        let owed = if pushes(state) { nodes } else { 0 };
        self.change_timer.expect(at, owed);
    }
}

/// A TLS client that trusts what the platform trusts, as an HTTPS client
/// does, or the CA `server_ca` (PEM); with `cert`, it offers that client
/// certificate.
fn tls_connector(
    endpoint: &Endpoint,
    server_ca: Option<&str>,
    cert: Option<NodeCert>,
) -> Result<(TlsConnector, ServerName<'static>), String> {
    use rustls::pki_types::pem::PemObject;
    use rustls_platform_verifier::BuilderVerifierExt;
    let builder = match server_ca {
        Some(pem) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes()) {
                let cert = cert.map_err(|e| format!("the server CA is not PEM: {e}"))?;
                roots.add(cert).map_err(|e| format!("the server CA: {e}"))?;
            }
            rustls::ClientConfig::builder().with_root_certificates(roots)
        }
        None => rustls::ClientConfig::builder()
            .with_platform_verifier()
            .map_err(|e| e.to_string())?,
    };
    let mut config = match cert {
        None => builder.with_no_client_auth(),
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| format!("the client certificate: {e}"))?,
    };
    // A kubelet's client makes a full handshake on every new connection:
    // client-go's tls.Config has no ClientSessionCache (kubernetes
    // staging/src/k8s.io/client-go/transport/transport.go, `TLSConfigFor`),
    // so Go's crypto/tls never resumes. So does this one, or a reconnect
    // would cost the server less than a kubelet's does.
    config.resumption = rustls::client::Resumption::disabled();
    let name = ServerName::try_from(endpoint.host.clone()).map_err(|e| e.to_string())?;
    Ok((TlsConnector::from(Arc::new(config)), name))
}

/// One node's connection to the controller, opened when needed and kept
/// alive between requests.
struct Link<'a> {
    pusher: &'a Pusher,
    node: &'a Node,
    /// Where the node's connections come from: its own address, when the
    /// controller is on loopback too (a kubelet connects from its host).
    source: Option<IpAddr>,
    sender: Option<SendRequest<Full<Bytes>>>,
    /// With client certificates, this node's own TLS client, made once.
    tls: Option<(TlsConnector, ServerName<'static>)>,
    /// The uid of the node that owns its Lease, once read.
    lease_owner: Option<String>,
}

impl<'a> Link<'a> {
    fn new(pusher: &'a Pusher, node: &'a Node) -> Link<'a> {
        let from = node.address.ip();
        let source = (pusher.address.ip().is_loopback()
            && from.is_loopback()
            && from.is_ipv4() == pusher.address.is_ipv4())
        .then_some(from);
        Link {
            pusher,
            node,
            source,
            sender: None,
            tls: None,
            lease_owner: None,
        }
    }

    /// The TLS client this node connects with, if any: its own, with its
    /// client certificate, or the fleet's.
    fn tls(&mut self) -> Result<Option<(TlsConnector, ServerName<'static>)>, String> {
        let p = self.pusher;
        if self.tls.is_none() {
            let cert = match (&p.bootstrap, &p.config.client_certs, p.endpoint.https) {
                (Some((_, issued)), _, _) => issued
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&self.node.name)
                    .map(|(chain, key)| (chain.clone(), key.clone_key()))
                    .ok_or_else(|| format!("{} has not joined yet", self.node.name))?,
                (None, Some(certs), true) => (certs.0)(&self.node.name)
                    .map_err(|e| format!("no client certificate for {}: {e}", self.node.name))?,
                _ => return Ok(p.tls.clone()),
            };
            let config = &p.config;
            self.tls = Some(tls_connector(
                &p.endpoint,
                config.server_ca.as_deref(),
                Some(cert),
            )?);
        }
        Ok(self.tls.clone())
    }

    /// Closes the connection (once idle, which it is between pushes); the
    /// next request opens a new one.
    fn disconnect(&mut self) {
        self.sender = None;
    }

    /// Opens the connection: TCP (and TLS), then an HTTP/1.1 handshake.
    async fn connect(&mut self) -> Result<SendRequest<Full<Bytes>>, String> {
        let tls = self.tls()?;
        let p = self.pusher;
        let address = p.address;
        let socket = match address {
            SocketAddr::V4(_) => TcpSocket::new_v4(),
            SocketAddr::V6(_) => TcpSocket::new_v6(),
        }
        .map_err(|e| format!("cannot open a socket: {e}"))?;
        if let Some(ip) = self.source {
            socket
                .bind(SocketAddr::new(ip, 0))
                .map_err(|e| format!("cannot connect from {ip}: {e}"))?;
        }
        let stream = tokio::time::timeout(p.config.connect_timeout, socket.connect(address))
            .await
            .map_err(|_| {
                format!(
                    "connect {address}: no answer within {}",
                    nodekeeper::duration::format(p.config.connect_timeout)
                )
            })?
            .map_err(|e| format!("connect {address}: {e}"))?;
        let _ = stream.set_nodelay(true);
        p.counters.connections.fetch_add(1, Ordering::Relaxed);
        match &tls {
            None => handshake(p, TokioIo::new(stream)).await,
            Some((connector, name)) => {
                let tls = connector
                    .connect(name.clone(), stream)
                    .await
                    .map_err(|e| format!("TLS handshake with {address}: {e}"))?;
                handshake(p, TokioIo::new(tls)).await
            }
        }
    }

    /// One request over the node's connection (opened first if needed),
    /// its answer read up to [`MAX_ANSWER`]. A failed or timed-out exchange
    /// closes the connection; the next request opens a new one. A request
    /// the server did not take up because it had just closed the idle
    /// connection is sent again once on a new one, as HTTP clients do.
    async fn send(
        &mut self,
        method: Method,
        path: String,
        content_type: &str,
        body: Bytes,
    ) -> Sent {
        let p = self.pusher;
        p.counters.sent.fetch_add(1, Ordering::Relaxed);
        let sent_at = Instant::now();
        let exchange = async {
            let reused = self.sender.as_ref().is_some_and(|s| !s.is_closed());
            match self
                .exchange(method.clone(), &path, content_type, body.clone())
                .await
            {
                Err(Failure::NotTaken(_)) if reused => {
                    self.sender = None;
                    self.exchange(method.clone(), &path, content_type, body)
                        .await
                }
                other => other,
            }
        };
        let result = tokio::select! {
            biased;
            _ = p.shutdown.cancelled() => return Sent::Stopped,
            r = tokio::time::timeout(p.config.request_timeout, exchange) => r,
        };
        let failure = match result {
            Ok(Ok((status, body, reusable))) => {
                p.counters.latency.record(sent_at.elapsed());
                if !reusable {
                    self.sender = None;
                }
                return Sent::Answered(Answer {
                    method,
                    path,
                    status,
                    body,
                });
            }
            Ok(Err(Failure::NotTaken(e) | Failure::Other(e))) => e,
            Err(_) => format!(
                "no answer within {}",
                nodekeeper::duration::format(p.config.request_timeout)
            ),
        };
        self.sender = None;
        Sent::Failed(format!("{method} {path}: {failure}"))
    }

    /// The exchange itself: status, body, and whether the connection can carry another request.
    async fn exchange(
        &mut self,
        method: Method,
        path: &str,
        content_type: &str,
        body: Bytes,
    ) -> Result<(StatusCode, Bytes, bool), Failure> {
        let response = self.request(method, path, content_type, body).await?;
        let status = response.status();
        let (body, complete) = read_capped(response.into_body(), MAX_ANSWER)
            .await
            .map_err(|e| Failure::Other(format!("reading the answer: {}", error_chain(&e))))?;
        Ok((status, body, complete))
    }

    /// Sends a request over the node's connection (opened first if
    /// needed) and answers the response as it begins, its body unread.
    async fn request(
        &mut self,
        method: Method,
        path: &str,
        content_type: &str,
        body: Bytes,
    ) -> Result<hyper::Response<Incoming>, Failure> {
        let p = self.pusher;
        if self.sender.as_ref().is_none_or(SendRequest::is_closed) {
            self.sender = Some(self.connect().await.map_err(Failure::Other)?);
        }
        let sender = self.sender.as_mut().expect("connected above");
        sender.ready().await.map_err(|e| {
            Failure::NotTaken(format!("the connection closed: {}", error_chain(&e)))
        })?;
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", p.endpoint.prefix))
            .header(HOST, p.authority.clone())
            .header(USER_AGENT, SIM_USER_AGENT)
            .header(ACCEPT, KUBELET_ACCEPT)
            .header(CONTENT_TYPE, content_type);
        if let Some(auth) = &p.authorization {
            request = request.header(AUTHORIZATION, auth.clone());
        }
        let request = request
            .body(Full::new(body))
            .map_err(|e| Failure::Other(format!("cannot build the request: {e}")))?;
        sender.send_request(request).await.map_err(|e| {
            // Closed before any answer began: the server never took the request up.
            if e.is_canceled() || e.is_incomplete_message() {
                Failure::NotTaken(error_chain(&e))
            } else {
                Failure::Other(error_chain(&e))
            }
        })
    }

    /// Renews the Lease, or first finds or creates it, as a kubelet's
    /// lease controller does (kubernetes
    /// `staging/src/k8s.io/component-helpers/apimachinery/lease/controller.go`
    /// `sync`, `ensureLease`, `newLease`; the owner from
    /// `pkg/kubelet/util/nodelease.go` `SetNodeOwnerFunc`): get the Lease and
    /// renew the one found; none, get the node for its uid, and create the
    /// Lease owned by it; no node yet, create nothing this round (the
    /// kubelet logs the missing node and tries at its next renewal). A
    /// renewal of a Lease that is gone starts again. Whether a Lease was
    /// created or renewed.
    async fn renew_lease(&mut self, created: &mut bool) -> bool {
        let p = self.pusher;
        let name = self.node.name.clone();
        let renew = p.node_now();
        // At most: renew (404) → get, create (409) → get, renew.
        for _ in 0..3 {
            if !*created && !self.find_lease(created).await {
                return false;
            }
            let mut lease = lease_body(&name, renew);
            if let Some(uid) = &self.lease_owner {
                lease["metadata"]["ownerReferences"] =
                    json!([{"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}]);
            }
            // In protobuf, as a kubelet sends its Lease (see `protobuf`).
            let body = Bytes::from(protobuf::encode(&lease));
            let (method, path) = if *created {
                (Method::PUT, format!("{LEASES_PATH}/{name}"))
            } else {
                (Method::POST, LEASES_PATH.to_owned())
            };
            let Some(answer) = self.answer(method, path, PROTOBUF, body).await else {
                return false;
            };
            match answer.status {
                s if s.is_success() => {
                    *created = true;
                    p.counters.leases.fetch_add(1, Ordering::Relaxed);
                    return true;
                }
                StatusCode::NOT_FOUND if *created => *created = false,
                StatusCode::CONFLICT if !*created => *created = true,
                _ => {
                    p.refused(&answer);
                    return false;
                }
            }
        }
        p.failed(format!(
            "lease {name}: created and deleted again while renewing"
        ));
        false
    }

    /// `ensureLease` up to the create: the Lease found (`created` set, its
    /// owner kept), or none and the owner to create it with; false when
    /// there is nothing to send this round: no node yet (quietly, as
    /// `newLease`'s error only skips the create), or an error answer.
    async fn find_lease(&mut self, created: &mut bool) -> bool {
        let p = self.pusher;
        let name = self.node.name.clone();
        let Some(found) = self.get(format!("{LEASES_PATH}/{name}")).await else {
            return false;
        };
        if found.status.is_success() {
            *created = true;
            self.lease_owner = serde_json::from_slice::<Value>(&found.body)
                .ok()
                .and_then(|l| {
                    l["metadata"]["ownerReferences"][0]["uid"]
                        .as_str()
                        .map(str::to_owned)
                });
            if self.lease_owner.is_some() {
                return true;
            }
            // Not owned yet: the kubelet reads its node to own it.
        } else if found.status != StatusCode::NOT_FOUND {
            p.refused(&found);
            return false;
        }
        let Some(node) = self.get(format!("{NODES_PATH}/{name}")).await else {
            return false;
        };
        if node.status == StatusCode::NOT_FOUND {
            // Renewed unowned, or not created this round.
            return *created;
        }
        if !node.status.is_success() {
            p.refused(&node);
            return false;
        }
        self.lease_owner = serde_json::from_slice::<Value>(&node.body)
            .ok()
            .and_then(|n| n["metadata"]["uid"].as_str().map(str::to_owned));
        true
    }

    /// A kubelet's CSINode initialisation at start, request by request
    /// (kubernetes `pkg/volume/csi/csi_plugin.go:975-1000`, then
    /// `pkg/volume/csi/nodeinfomanager/nodeinfomanager.go`
    /// `tryInitializeCSINodeWithAnnotation` and `CreateCSINode`): get it
    /// (any answer but an error will do for the wait), get it again, get
    /// the node for its uid, create it with an owner reference to the node
    /// and no drivers, in protobuf. True once it exists.
    async fn init_csinode(&mut self) -> bool {
        let p = self.pusher;
        let name = self.node.name.clone();
        let path = format!("{CSINODES_PATH}/{name}");
        let Some(waited) = self.get(format!("{path}?resourceVersion=0")).await else {
            return false;
        };
        if waited.status.is_server_error() {
            p.refused(&waited);
            return false;
        }
        let Some(found) = self.get(path).await else {
            return false;
        };
        match found.status {
            s if s.is_success() => {
                p.counters.csinodes.fetch_add(1, Ordering::Relaxed);
                return true;
            }
            StatusCode::NOT_FOUND => {}
            _ => {
                p.refused(&found);
                return false;
            }
        }
        let Some(uid) = self.node_uid().await else {
            return false;
        };
        let csinode = json!({
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSINode",
            "metadata": {
                "name": name,
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}],
            },
            "spec": {"drivers": []},
        });
        let body = Bytes::from(protobuf::encode(&csinode));
        let Some(created) = self
            .answer(Method::POST, CSINODES_PATH.to_owned(), PROTOBUF, body)
            .await
        else {
            return false;
        };
        if created.status.is_success() || created.status == StatusCode::CONFLICT {
            p.counters.csinodes.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        p.refused(&created);
        false
    }

    /// The node's uid, for an owner reference (`GET /api/v1/nodes/NAME`,
    /// `nodeinfomanager.go:459`); `None`, the failure counted, without it.
    async fn node_uid(&mut self) -> Option<String> {
        let node = self.get(format!("{NODES_PATH}/{}", self.node.name)).await?;
        let uid = serde_json::from_slice::<Value>(&node.body)
            .ok()
            .and_then(|n| n["metadata"]["uid"].as_str().map(str::to_owned));
        match (node.status.is_success(), uid) {
            (true, Some(uid)) => Some(uid),
            _ => {
                self.pusher.refused(&node);
                None
            }
        }
    }

    /// A `GET`; `None` (the failure counted) without an answer.
    async fn get(&mut self, path: String) -> Option<Answer> {
        self.answer(Method::GET, path, "", Bytes::new()).await
    }

    /// [`Link::send`]'s answer; `None` without one, the failure counted
    /// (or the fleet stopping).
    async fn answer(
        &mut self,
        method: Method,
        path: String,
        content_type: &str,
        body: Bytes,
    ) -> Option<Answer> {
        match self.send(method, path, content_type, body).await {
            Sent::Answered(a) => Some(a),
            Sent::Failed(message) => {
                self.pusher.failed(message);
                None
            }
            Sent::Stopped => None,
        }
    }

    /// Patches the node's status with what changed since the node was last
    /// seen; true if the controller accepted it.
    async fn update_status(&mut self, status: &mut NodeStatus, state: KubeletState) -> bool {
        let p = self.pusher;
        let Some(write) = status.patch(state, p.node_now()) else {
            return false;
        };
        let path = format!("{NODES_PATH}/{}/status", self.node.name);
        let answer = match self
            .send(
                Method::PATCH,
                path,
                STRATEGIC_MERGE,
                Bytes::from(write.body.to_string()),
            )
            .await
        {
            Sent::Answered(a) => a,
            Sent::Failed(message) => {
                status.forget();
                p.failed(message);
                return false;
            }
            Sent::Stopped => return false,
        };
        if answer.status.is_success() {
            status.accepted(&answer.body, write.conditions);
            p.counters.statuses.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        status.forget();
        match answer.status {
            StatusCode::NOT_FOUND if p.config.register => {
                return self.register(status, state).await;
            }
            StatusCode::NOT_FOUND if !p.warned_unknown.swap(true, Ordering::Relaxed) => {
                tracing::warn!(
                    node = %self.node.name,
                    "the controller does not know this simulated node; list the fleet in its \
                     nodes file (sim --write-nodes-file) or pass --register; retrying every \
                     interval (logged once for the fleet)"
                );
            }
            _ => {}
        }
        p.refused(&answer);
        false
    }

    /// `POST /api/v1/nodes` with the node and its status, as a kubelet
    /// registers; true if it is registered now.
    async fn register(&mut self, status: &mut NodeStatus, state: KubeletState) -> bool {
        let p = self.pusher;
        let node = self.node;
        let ip = node.address.ip().to_string();
        let Some(write) = status.registration(&node.name, &ip, state, p.node_now()) else {
            return false;
        };
        let Some(answer) = self
            .answer(
                Method::POST,
                NODES_PATH.to_owned(),
                PROTOBUF,
                Bytes::from(protobuf::encode(&write.body)),
            )
            .await
        else {
            return false;
        };
        match answer.status {
            s if s.is_success() => {
                tracing::debug!(node = %node.name, "simulated node registered");
                status.accepted(&answer.body, write.conditions);
                p.counters.registrations.fetch_add(1, Ordering::Relaxed);
                true
            }
            // Registered meanwhile: the next status update goes through.
            StatusCode::CONFLICT => false,
            _ => {
                if !p.warned_refused.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        node = %node.name,
                        error = %answer.describe(),
                        "the controller refused to register a simulated node (it needs \
                         --allow-node-registration); retrying every interval (logged once for the fleet)"
                    );
                }
                p.refused(&answer);
                false
            }
        }
    }
}

/// The HTTP/1.1 handshake over an open stream; the connection is driven by
/// a task of its own, which ends when the node drops its sender.
async fn handshake<T>(pusher: &Pusher, io: TokioIo<T>) -> Result<SendRequest<Full<Bytes>>, String>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| format!("HTTP handshake: {}", error_chain(&e)))?;
    pusher.tracker.spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %error_chain(&e), "simulated kubelet connection ended");
        }
    });
    Ok(sender)
}

/// Reads an answer's body, keeping at most `cap` bytes; also says whether it
/// was read to its end (only then can the connection carry another request).
async fn read_capped(mut body: Incoming, cap: usize) -> Result<(Bytes, bool), hyper::Error> {
    let mut read = BytesMut::new();
    // Ends at the end of the body or at the cap.
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        let room = cap - read.len();
        read.extend_from_slice(&data[..data.len().min(room)]);
        if data.len() > room {
            return Ok((read.freeze(), false));
        }
    }
    Ok((read.freeze(), true))
}

/// An error with its causes: "connection error: ... Connection reset by peer".
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// RFC 3339 with microseconds: a Kubernetes `MicroTime` (Lease times).
fn micro_time(t: Timestamp) -> String {
    format!("{t:.6}")
}

/// The Lease a kubelet writes on creation and at each renewal.
fn lease_body(name: &str, renew: Timestamp) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-node-lease"},
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": LEASE_DURATION_SECONDS,
            "renewTime": micro_time(renew),
        },
    })
}

/// `status.nodeInfo` of a simulated node.
fn node_info(name: &str, boot_id: &str) -> Value {
    json!({
        "machineID": name,
        "systemUUID": name,
        "bootID": boot_id,
        "kernelVersion": "6.1.0-sim",
        "osImage": "nodekeeper simulated kubelet",
        "containerRuntimeVersion": "sim://1.0.0",
        "kubeletVersion": SIM_KUBELET_VERSION,
        "kubeProxyVersion": "",
        "operatingSystem": "linux",
        "architecture": std::env::consts::ARCH,
    })
}

#[cfg(test)]
// Tests write and read their fixtures with std::fs: blocking a test's own
// runtime stalls nothing else.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    #[test]
    fn nodes_start_evenly_over_the_interval() {
        let ten = Duration::from_secs(10);
        assert_eq!(start_offset(0, 4, ten), Duration::ZERO);
        assert_eq!(start_offset(1, 4, ten), Duration::from_millis(2500));
        assert_eq!(start_offset(3, 4, ten), Duration::from_millis(7500));
        assert_eq!(
            start_offset(9_999, 10_000, ten),
            Duration::from_millis(9999)
        );
        assert_eq!(start_offset(0, 1, ten), Duration::ZERO);
    }

    #[test]
    fn times_are_kubernetes_time_and_micro_time() {
        use super::node_status::time;
        let t: Timestamp = "2026-11-30T09:00:00.123456789Z".parse().unwrap();
        assert_eq!(micro_time(t), "2026-11-30T09:00:00.123456Z");
        assert_eq!(time(t), "2026-11-30T09:00:00Z");
        let whole: Timestamp = "2026-11-30T09:00:00Z".parse().unwrap();
        assert_eq!(micro_time(whole), "2026-11-30T09:00:00.000000Z");
    }

    #[test]
    fn a_lease_is_what_a_kubelet_renews() {
        let t: Timestamp = "2026-11-30T09:00:00.5Z".parse().unwrap();
        assert_eq!(
            lease_body("edge-1", t),
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "edge-1", "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": "edge-1", "leaseDurationSeconds": 40,
                         "renewTime": "2026-11-30T09:00:00.500000Z"}})
        );
    }

    #[test]
    fn configs_are_checked_before_anything_starts() {
        assert!(PushConfig::new("http://127.0.0.1:8080").validate().is_ok());
        let endpoint = Endpoint::parse("http://127.0.0.1:8080/").unwrap();
        assert_eq!(
            (
                endpoint.https,
                endpoint.port,
                endpoint.authority(),
                endpoint.prefix.as_str()
            ),
            (false, 8080, "127.0.0.1:8080".to_string(), "")
        );
        let endpoint = Endpoint::parse("https://[::1]/api-prefix/").unwrap();
        assert_eq!(
            (
                endpoint.host.as_str(),
                endpoint.port,
                endpoint.authority(),
                endpoint.prefix.as_str()
            ),
            ("::1", 443, "[::1]".to_string(), "/api-prefix")
        );
        for bad in [
            "127.0.0.1:8080",
            "ftp://h/",
            "http://h/?q=1",
            "not a url",
            "http://u:p@h/",
        ] {
            let e = PushConfig::new(bad).validate().unwrap_err();
            assert!(e.to_string().starts_with("--push"), "{bad}: {e}");
        }
        let zero = PushConfig {
            status_update_interval: Duration::ZERO,
            ..PushConfig::new("http://h")
        };
        assert!(zero
            .validate()
            .unwrap_err()
            .to_string()
            .contains("--status-update-interval"));
        let far = PushConfig {
            clock_skew: SignedDuration::from_hours(-24 * 2000),
            ..PushConfig::new("http://h")
        };
        assert!(far.validate().is_err());
    }

    #[test]
    fn tokens_are_the_first_line_and_never_printed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "s3cret\nsecond line\n").unwrap();
        let token = BearerToken::from_file(&file).unwrap();
        assert_eq!(token, BearerToken::new("s3cret").unwrap());
        assert!(!format!("{token:?}").contains("s3cret"));
        std::fs::write(&file, "\n").unwrap();
        assert!(matches!(
            BearerToken::from_file(&file),
            Err(PushSetupError::EmptyToken { .. })
        ));
        assert!(matches!(
            BearerToken::from_file(&dir.path().join("missing")),
            Err(PushSetupError::TokenFile { .. })
        ));
    }

    #[test]
    fn client_certificates_are_read_from_each_node_s_file() {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(Vec::<String>::new())
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let pem = format!("{}{}", cert.pem(), key.serialize_pem());
        std::fs::write(dir.path().join("node-a.pem"), &pem).unwrap();
        std::fs::write(dir.path().join("node-b.pem"), cert.pem()).unwrap();
        let certs = ClientCerts::from_dir(dir.path()).unwrap();
        let (chain, read_key) = (certs.0)("node-a").unwrap();
        assert_eq!(chain, vec![cert.der().clone()]);
        assert_eq!(read_key.secret_der(), key.serialize_der().as_slice());
        let no_key = (certs.0)("node-b").unwrap_err();
        assert!(no_key.contains("node-b.pem: no private key"), "{no_key}");
        let missing = (certs.0)("node-c").unwrap_err();
        assert!(missing.contains("node-c.pem"), "{missing}");
        assert!(matches!(
            ClientCerts::from_dir(&dir.path().join("node-a.pem")),
            Err(PushSetupError::CertDir { .. })
        ));
    }
}
