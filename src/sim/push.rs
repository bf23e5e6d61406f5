//! Simulated kubelets that push, as real ones do to an API server: each node
//! creates and renews its Lease, patches its node status, and registers itself
//! when asked and unknown.
//!
//! Every node runs two loops (Lease renewals and status updates), started at
//! `i * interval / N` so a large fleet pushes evenly instead of in bursts. All
//! of them share one pooled HTTP client and a bound on requests in flight. A
//! node pushes while `up`, `slow` or `sick` (Ready=False); a `down` or `hang`
//! kubelet pushes nothing. Bodies are written as JSON by hand: they are what a
//! kubelet puts on the wire, and a strategic-merge patch has no typed form.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use jiff::{SignedDuration, Timestamp};
use reqwest::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use reqwest::{Method, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::Semaphore;
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::kubelet::Node;
use super::KubeletState;

/// kubelet's default for both intervals (nodeStatusUpdateFrequency, and a
/// quarter of the 40s Lease duration).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);
/// What kubelets write into `spec.leaseDurationSeconds`.
pub const LEASE_DURATION_SECONDS: i32 = 40;
/// Requests in flight at once, over the whole fleet.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 256;
/// A clock further off than this is a typo, and would leave jiff's range.
const MAX_CLOCK_SKEW: SignedDuration = SignedDuration::from_hours(24 * 1000);
/// Answers are small Statuses or objects; the rest is not read.
const MAX_ANSWER: usize = 64 * 1024;
/// How often the counters are logged.
const REPORT_EVERY: Duration = Duration::from_secs(10);

const LEASES_PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
const NODES_PATH: &str = "/api/v1/nodes";
const JSON: &str = "application/json";
const STRATEGIC_MERGE: &str = "application/strategic-merge-patch+json";
const SIM_KUBELET_VERSION: &str = concat!("v1.33.0-nodekeeper-sim.", env!("CARGO_PKG_VERSION"));

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
    /// Requests in flight at once, over the whole fleet.
    pub max_in_flight: usize,
    /// Limit on opening a connection.
    pub connect_timeout: Duration,
    /// Limit on one whole request, answer included.
    pub request_timeout: Duration,
}

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
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
        }
    }

    /// Checks every field; the CLI calls this before anything is bound.
    pub fn validate(&self) -> Result<(), PushSetupError> {
        base_url(&self.url)?;
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
        if self.max_in_flight == 0 {
            return Err(PushSetupError::Zero {
                what: "--push-concurrency",
            });
        }
        if self.clock_skew.abs() > MAX_CLOCK_SKEW {
            return Err(PushSetupError::ClockSkew(self.clock_skew));
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
    #[error("cannot set up the HTTP client for pushing: {0}")]
    Client(#[source] reqwest::Error),
    #[error("the fleet already pushes")]
    AlreadyPushing,
}

/// `url` without a trailing slash, checked to be an http(s) base URL.
fn base_url(url: &str) -> Result<String, PushSetupError> {
    let bad = |reason: &str| PushSetupError::BadUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let parsed = reqwest::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad("the scheme must be http or https"));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad("no host"));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(bad("a base URL has no query or fragment"));
    }
    Ok(url.trim_end_matches('/').to_owned())
}

/// Parses `--clock-skew`: a duration such as `3h` or `-5h30m`.
pub fn parse_clock_skew(s: &str) -> Result<SignedDuration, String> {
    let text = s.trim();
    let (negative, magnitude) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let d = crate::duration::parse(magnitude)?;
    let d = SignedDuration::try_from(d).map_err(|_| format!("{s:?} is too long"))?;
    if d > MAX_CLOCK_SKEW {
        return Err(format!("{s:?} is more than 1000 days"));
    }
    Ok(if negative { -d } else { d })
}

/// What the fleet pushed so far, for the control endpoint and logs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushStats {
    /// Requests sent, whatever came of them.
    pub sent: u64,
    /// Requests without a successful answer (no answer, or refused).
    pub failed: u64,
    /// Lease creations and renewals accepted.
    pub leases: u64,
    /// Node status updates accepted.
    pub statuses: u64,
    /// Nodes registered by the fleet.
    pub registrations: u64,
    /// The newest failure, as `METHOD path: what happened`.
    pub last_error: Option<String>,
}

#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    failed: AtomicU64,
    leases: AtomicU64,
    statuses: AtomicU64,
    registrations: AtomicU64,
    last_error: Mutex<Option<String>>,
}

/// What the pushing loops share: configuration, client, bound, counters.
pub(super) struct Pusher {
    base: String,
    config: PushConfig,
    client: reqwest::Client,
    authorization: Option<HeaderValue>,
    in_flight: Semaphore,
    counters: Counters,
    warned_unknown: AtomicBool,
    warned_refused: AtomicBool,
    shutdown: CancellationToken,
}

impl fmt::Debug for Pusher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pusher").field("url", &self.base).finish()
    }
}

/// Starts pushing for every node: two loops each, spread over their
/// intervals, plus the logger of the counters. All stop with `shutdown`.
pub(super) fn start(
    config: PushConfig,
    nodes: &[Arc<Node>],
    tracker: &TaskTracker,
    shutdown: CancellationToken,
) -> Result<Arc<Pusher>, PushSetupError> {
    config.validate()?;
    let pusher = Arc::new(Pusher::new(config, shutdown)?);
    let now = Instant::now();
    let lease = pusher.config.lease_renew_interval;
    let status = pusher.config.status_update_interval;
    for (i, node) in nodes.iter().enumerate() {
        let first_lease = now + start_offset(i, nodes.len(), lease);
        let first_status = now + start_offset(i, nodes.len(), status);
        tracker.spawn(lease_loop(pusher.clone(), node.clone(), first_lease));
        tracker.spawn(status_loop(pusher.clone(), node.clone(), first_status));
    }
    tracker.spawn(report_loop(pusher.clone()));
    tracing::info!(
        url = %pusher.base,
        nodes = nodes.len(),
        lease_renew_interval = ?lease,
        status_update_interval = ?status,
        clock_skew = %format_args!("{:#}", pusher.config.clock_skew),
        register = pusher.config.register,
        "simulated kubelets push"
    );
    Ok(pusher)
}

/// When node `index` of `nodes` first pushes, after the start: spread evenly over one interval.
fn start_offset(index: usize, nodes: usize, interval: Duration) -> Duration {
    let nanos = interval.as_nanos() * index as u128 / nodes.max(1) as u128;
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// A ticker that, when a push overran its slot, waits a full interval after it.
fn ticks(first: Instant, period: Duration) -> Interval {
    let mut ticks = tokio::time::interval_at(first, period);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticks
}

/// Whether a kubelet in `state` talks to the API server at all.
fn pushes(state: KubeletState) -> bool {
    !matches!(state, KubeletState::Down | KubeletState::Hang)
}

/// Renews the node's Lease every interval while its kubelet runs.
async fn lease_loop(pusher: Arc<Pusher>, node: Arc<Node>, first: Instant) {
    let mut ticks = ticks(first, pusher.config.lease_renew_interval);
    let mut created = false;
    // Ends on shutdown; each turn is one renewal slot.
    loop {
        tokio::select! {
            biased;
            _ = pusher.shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        if pushes(*node.state.borrow()) {
            pusher.renew_lease(&node.name, &mut created).await;
        }
    }
}

/// Updates the node's status every interval while its kubelet runs.
async fn status_loop(pusher: Arc<Pusher>, node: Arc<Node>, first: Instant) {
    let info = node_info(&node.name, &uuid::Uuid::new_v4().to_string());
    let mut ticks = ticks(first, pusher.config.status_update_interval);
    // Ends on shutdown; each turn is one update slot.
    loop {
        tokio::select! {
            biased;
            _ = pusher.shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let state = *node.state.borrow();
        if let Some(ready) = ready_condition(state, pusher.node_now()) {
            pusher.update_status(&node, ready, &info).await;
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
            leases = s.leases,
            statuses = s.statuses,
            registrations = s.registrations,
            last_error = s.last_error.as_deref().unwrap_or("none"),
            "simulated kubelet pushes so far"
        );
    }
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
    fn new(config: PushConfig, shutdown: CancellationToken) -> Result<Pusher, PushSetupError> {
        crate::install_crypto_provider();
        let base = base_url(&config.url)?;
        let authorization = match &config.token {
            None => None,
            Some(BearerToken(token)) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
                    .map_err(|_| PushSetupError::BadToken)?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        let client = reqwest::Client::builder()
            .no_proxy()
            .http1_only()
            .pool_max_idle_per_host(config.max_in_flight)
            .connect_timeout(config.connect_timeout)
            .timeout(config.request_timeout)
            .user_agent(concat!("nodekeeper-sim/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(PushSetupError::Client)?;
        Ok(Pusher {
            base,
            in_flight: Semaphore::new(config.max_in_flight),
            config,
            client,
            authorization,
            counters: Counters::default(),
            warned_unknown: AtomicBool::new(false),
            warned_refused: AtomicBool::new(false),
            shutdown,
        })
    }

    /// The counters so far.
    pub(super) fn stats(&self) -> PushStats {
        let c = &self.counters;
        PushStats {
            sent: c.sent.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            leases: c.leases.load(Ordering::Relaxed),
            statuses: c.statuses.load(Ordering::Relaxed),
            registrations: c.registrations.load(Ordering::Relaxed),
            last_error: c
                .last_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }

    /// The simulated node's own clock.
    fn node_now(&self) -> Timestamp {
        let now = Timestamp::now();
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

    /// One request, within the bound on requests in flight; the answer's body
    /// is read up to [`MAX_ANSWER`].
    async fn send(&self, method: Method, path: String, content_type: &str, body: &Value) -> Sent {
        let permit = tokio::select! {
            biased;
            _ = self.shutdown.cancelled() => return Sent::Stopped,
            permit = self.in_flight.acquire() => match permit {
                Ok(p) => p,
                Err(_) => return Sent::Stopped,
            },
        };
        self.counters.sent.fetch_add(1, Ordering::Relaxed);
        let mut request = self
            .client
            .request(method.clone(), format!("{}{path}", self.base))
            .header(CONTENT_TYPE, content_type)
            .body(body.to_string());
        if let Some(auth) = &self.authorization {
            request = request.header(AUTHORIZATION, auth.clone());
        }
        let exchange = async {
            let mut response = request.send().await?;
            let status = response.status();
            let body = read_capped(&mut response, MAX_ANSWER).await?;
            Ok::<_, reqwest::Error>((status, body))
        };
        let result = tokio::select! {
            biased;
            _ = self.shutdown.cancelled() => return Sent::Stopped,
            r = exchange => r,
        };
        drop(permit);
        match result {
            Ok((status, body)) => Sent::Answered(Answer {
                method,
                path,
                status,
                body,
            }),
            Err(e) => Sent::Failed(format!("{method} {path}: {}", error_chain(&e))),
        }
    }

    /// Creates the Lease if it is not known to exist, else renews it; a
    /// renewal of a Lease that is gone creates it again.
    async fn renew_lease(&self, name: &str, created: &mut bool) {
        let body = lease_body(name, self.node_now());
        // At most: renew (404) → create (409) → renew.
        for _ in 0..3 {
            let (method, path) = if *created {
                (Method::PUT, format!("{LEASES_PATH}/{name}"))
            } else {
                (Method::POST, LEASES_PATH.to_owned())
            };
            let answer = match self.send(method, path, JSON, &body).await {
                Sent::Answered(a) => a,
                Sent::Failed(message) => return self.failed(message),
                Sent::Stopped => return,
            };
            match answer.status {
                s if s.is_success() => {
                    *created = true;
                    self.counters.leases.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                StatusCode::NOT_FOUND if *created => *created = false,
                StatusCode::CONFLICT if !*created => *created = true,
                _ => return self.failed(answer.describe()),
            }
        }
        self.failed(format!(
            "lease {name}: created and deleted again while renewing"
        ));
    }

    async fn update_status(&self, node: &Node, ready: Value, info: &Value) {
        let path = format!("{NODES_PATH}/{}/status", node.name);
        let patch = status_patch(&ready, info);
        let answer = match self
            .send(Method::PATCH, path, STRATEGIC_MERGE, &patch)
            .await
        {
            Sent::Answered(a) => a,
            Sent::Failed(message) => return self.failed(message),
            Sent::Stopped => return,
        };
        match answer.status {
            s if s.is_success() => {
                self.counters.statuses.fetch_add(1, Ordering::Relaxed);
            }
            StatusCode::NOT_FOUND if self.config.register => {
                self.register(node, ready, info).await;
            }
            StatusCode::NOT_FOUND => {
                if !self.warned_unknown.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        node = %node.name,
                        "the controller does not know this simulated node; list the fleet in its \
                         nodes file (sim --write-nodes-file) or pass --register; retrying every \
                         interval (logged once for the fleet)"
                    );
                }
                self.failed(answer.describe());
            }
            _ => self.failed(answer.describe()),
        }
    }

    /// `POST /api/v1/nodes` with the node and its status, as a kubelet registers.
    async fn register(&self, node: &Node, ready: Value, info: &Value) {
        let body = registration(&node.name, &node.address.ip().to_string(), ready, info);
        let answer = match self
            .send(Method::POST, NODES_PATH.to_owned(), JSON, &body)
            .await
        {
            Sent::Answered(a) => a,
            Sent::Failed(message) => return self.failed(message),
            Sent::Stopped => return,
        };
        match answer.status {
            s if s.is_success() => {
                tracing::debug!(node = %node.name, "simulated node registered");
                self.counters.registrations.fetch_add(1, Ordering::Relaxed);
            }
            // Registered meanwhile: the next status update goes through.
            StatusCode::CONFLICT => {}
            _ => {
                if !self.warned_refused.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        node = %node.name,
                        error = %answer.describe(),
                        "the controller refused to register a simulated node (it needs \
                         --allow-node-registration); retrying every interval (logged once for the fleet)"
                    );
                }
                self.failed(answer.describe());
            }
        }
    }
}

/// Reads a response body, keeping at most `cap` bytes; the rest is left unread.
async fn read_capped(response: &mut reqwest::Response, cap: usize) -> reqwest::Result<Bytes> {
    let mut body = BytesMut::new();
    // Ends at the end of the body or at the cap.
    while let Some(chunk) = response.chunk().await? {
        let room = cap - body.len();
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() == cap {
            break;
        }
    }
    Ok(body.freeze())
}

/// A reqwest error with its causes: "error sending request: ... Connection refused".
fn error_chain(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
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

/// RFC 3339 in whole seconds: a Kubernetes `Time` (condition times).
fn time(t: Timestamp) -> String {
    format!("{t:.0}")
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

/// The Ready condition a kubelet in `state` posts, with its heartbeat at
/// `now` on its clock; `None` when it posts nothing.
fn ready_condition(state: KubeletState, now: Timestamp) -> Option<Value> {
    let (status, reason, message) = match state {
        KubeletState::Up | KubeletState::Slow => {
            ("True", "KubeletReady", "kubelet is posting ready status")
        }
        KubeletState::Sick => (
            "False",
            "KubeletNotReady",
            "PLEG is not healthy: pleg was last seen active 3m0s ago; threshold is 3m0s (simulated)",
        ),
        KubeletState::Down | KubeletState::Hang => return None,
    };
    Some(json!({
        "type": "Ready",
        "status": status,
        "lastHeartbeatTime": time(now),
        "reason": reason,
        "message": message,
    }))
}

/// The strategic-merge patch of `nodes/{name}/status` a kubelet sends.
fn status_patch(ready: &Value, info: &Value) -> Value {
    json!({
        "status": {
            "$setElementOrder/conditions": [{"type": "Ready"}],
            "conditions": [ready],
            "nodeInfo": info,
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

/// The Node a kubelet posts to register itself.
fn registration(name: &str, ip: &str, ready: Value, info: &Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": std::env::consts::ARCH,
            },
        },
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "Hostname", "address": name},
            ],
            "capacity": {"cpu": "1", "memory": "3Gi", "pods": "110"},
            "conditions": [ready],
            "nodeInfo": info,
        },
    })
}

#[cfg(test)]
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

    #[test]
    fn times_are_kubernetes_time_and_micro_time() {
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
    fn ready_follows_the_simulated_state() {
        let t: Timestamp = "2026-11-30T09:00:00Z".parse().unwrap();
        let up = ready_condition(KubeletState::Up, t).unwrap();
        assert_eq!(
            (&up["status"], &up["reason"], &up["lastHeartbeatTime"]),
            (
                &json!("True"),
                &json!("KubeletReady"),
                &json!("2026-11-30T09:00:00Z")
            )
        );
        assert_eq!(
            ready_condition(KubeletState::Slow, t).unwrap()["status"],
            "True"
        );
        let sick = ready_condition(KubeletState::Sick, t).unwrap();
        assert_eq!(
            (&sick["status"], &sick["reason"]),
            (&json!("False"), &json!("KubeletNotReady"))
        );
        assert_eq!(ready_condition(KubeletState::Down, t), None);
        assert_eq!(ready_condition(KubeletState::Hang, t), None);
    }

    #[test]
    fn status_patches_and_registrations_carry_the_condition_and_node_info() {
        let t: Timestamp = "2026-11-30T09:00:00Z".parse().unwrap();
        let ready = ready_condition(KubeletState::Up, t).unwrap();
        let info = node_info("sim-00001", "boot");
        let patch = status_patch(&ready, &info);
        assert_eq!(patch["status"]["conditions"][0], ready);
        assert_eq!(
            patch["status"]["$setElementOrder/conditions"],
            json!([{"type": "Ready"}])
        );
        assert_eq!(patch["status"]["nodeInfo"]["bootID"], "boot");
        assert!(patch["status"]["nodeInfo"]["kubeletVersion"]
            .as_str()
            .unwrap()
            .starts_with("v1."));
        let node = registration("sim-00001", "127.101.0.2", ready.clone(), &info);
        assert_eq!(node["metadata"]["name"], "sim-00001");
        assert_eq!(
            node["status"]["addresses"][0],
            json!({"type": "InternalIP", "address": "127.101.0.2"})
        );
        assert_eq!(node["status"]["conditions"][0], ready);
    }

    #[test]
    fn configs_are_checked_before_anything_starts() {
        assert!(PushConfig::new("http://127.0.0.1:8080").validate().is_ok());
        assert_eq!(
            base_url("http://127.0.0.1:8080/").unwrap(),
            "http://127.0.0.1:8080"
        );
        for bad in ["127.0.0.1:8080", "ftp://h/", "http://h/?q=1", "not a url"] {
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
}
