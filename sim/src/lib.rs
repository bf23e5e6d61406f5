//! A fleet of simulated kubelets on loopback addresses, whose `/healthz` health tests, the demo and benchmarks control.
//!
//! Node `i` listens on its own address `base_ip + i` (every 127/8 address binds
//! without configuration on Linux), so a controller sees N distinct kubelets.
//! Each node's state lives in a shared `kubelet::Node`; a `watch` channel
//! wakes its accept loop and connections when the state changes, so `Down`
//! closes the listener and open connections, and leaving `Hang` releases hung
//! requests. The control endpoint (`control.rs`) exposes the same switches as
//! JSON over HTTP for people and scripts; [`FleetHandle`] exposes them to code.
//! [`Fleet::start_pushing`] makes the same nodes push heartbeats to a
//! controller as well, as real kubelets do (`push.rs`).
//!
//! [`apiserver`] is the other side of the mirror: an in-process fake
//! Kubernetes API server with fault injection, for tests and benchmarks;
//! [`floor`] the least server of what pushing kubelets send, which the push
//! benchmark measures in place of the controller.

pub mod apiserver;
pub mod bench;
pub mod bootstrap;
pub mod command;
mod control;
pub mod floor;
mod kubelet;
pub mod latency;
pub mod protobuf;
pub mod push;
pub mod simulator;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use kubelet::Node;
pub use push::{BearerToken, PushConfig, PushSetupError, PushStats};

/// How a simulated kubelet answers `GET /healthz`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KubeletState {
    /// 200 `ok`.
    Up,
    /// Listener closed, open connections closed: connections are refused.
    Down,
    /// 500 with a failed-check body, as a kubelet whose sync loop is stuck.
    Sick,
    /// Requests are read but never answered, until the state changes.
    Hang,
    /// 200 `ok` after [`FleetConfig::slow_delay`].
    Slow,
}

/// The valid spellings, for error messages.
pub const VALID_STATES: &str = "up, down, sick, hang, slow";

impl KubeletState {
    /// Every state, in the order of [`VALID_STATES`].
    pub const ALL: [KubeletState; 5] = [
        KubeletState::Up,
        KubeletState::Down,
        KubeletState::Sick,
        KubeletState::Hang,
        KubeletState::Slow,
    ];

    /// The lowercase name used by serde, `Display` and `FromStr`.
    pub const fn as_str(self) -> &'static str {
        match self {
            KubeletState::Up => "up",
            KubeletState::Down => "down",
            KubeletState::Sick => "sick",
            KubeletState::Hang => "hang",
            KubeletState::Slow => "slow",
        }
    }
}

impl fmt::Display for KubeletState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A state name that is none of [`VALID_STATES`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown kubelet state {input:?}; valid states: {VALID_STATES}")]
pub struct ParseStateError {
    input: String,
}

impl ParseStateError {
    /// The rejected text.
    pub fn input(&self) -> &str {
        &self.input
    }
}

impl FromStr for KubeletState {
    type Err = ParseStateError;

    /// Accepts the lowercase names; case and surrounding spaces are forgiven
    /// because people type these on command lines.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        KubeletState::ALL
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(t))
            .ok_or_else(|| ParseStateError {
                input: s.to_owned(),
            })
    }
}

/// How to lay out and serve a fleet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetConfig {
    /// How many simulated kubelets; at least 1.
    pub nodes: usize,
    /// Address of node 0; node `i` gets `base_ip + i`, skipping addresses whose
    /// last octet is 0 or 255. Must be in 127.0.0.0/8 and stay there.
    pub base_ip: Ipv4Addr,
    /// The port every node listens on. 0 picks one free port for the whole fleet.
    pub port: u16,
    /// Node names are this prefix plus the zero-padded index.
    pub name_prefix: String,
    /// Where the control HTTP endpoint listens.
    pub control: SocketAddr,
    /// How long `Slow` nodes wait before answering.
    pub slow_delay: Duration,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            nodes: 1,
            base_ip: Ipv4Addr::new(127, 1, 0, 1),
            port: 10250,
            name_prefix: "sim-".to_owned(),
            control: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)),
            slow_delay: Duration::from_secs(2),
        }
    }
}

impl FleetConfig {
    /// The nodes' names, in order: known before the fleet starts, so that
    /// their client certificates can be made first.
    pub fn node_names(&self) -> impl Iterator<Item = String> + '_ {
        let width = name_width(self.nodes);
        (0..self.nodes).map(move |i| node_name(&self.name_prefix, i, width))
    }
}

/// One simulated kubelet's identity.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimNode {
    /// `name_prefix` plus the zero-padded index, e.g. `sim-00000`.
    pub name: String,
    /// Where its `/healthz` listens.
    pub address: SocketAddr,
}

/// One node as the control endpoint reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    pub name: String,
    pub address: SocketAddr,
    /// The state it was last set to.
    pub state: KubeletState,
    /// `/healthz` requests served (answered or hung) so far.
    pub requests: u64,
    /// Connections open to it right now.
    pub connections: u64,
    /// Whether the listener is open right now. Differs from `state != down`
    /// briefly after a change, or while a rebind keeps failing.
    pub listening: bool,
}

/// The fleet at a glance, as `GET /stats` of the control endpoint shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetStats {
    pub nodes: usize,
    /// How many nodes are in each state.
    pub states: std::collections::BTreeMap<KubeletState, usize>,
    /// What the fleet pushed so far; absent when it does not push.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pushes: Option<PushStats>,
}

/// Why the fleet could not start or a request to it failed.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A simulated kubelet could not listen on its address.
    #[error("cannot listen on {addr}: {}", bind_hint(.source))]
    Bind { addr: SocketAddr, source: io::Error },
    /// The control endpoint could not listen on its address.
    #[error("cannot listen on the control address {addr}: {}", control_hint(.source))]
    ControlBind { addr: SocketAddr, source: io::Error },
    /// `base_ip` is unusable; the message says why.
    #[error("{0}")]
    BaseIp(String),
    /// No simulated kubelet has this name.
    #[error("no simulated node named {0:?}")]
    UnknownNode(String),
    /// The addresses of the fleet would leave 127.0.0.0/8.
    #[error(
        "--nodes {nodes} from --base-ip {base_ip} would run past 127.255.255.254 and leave \
         127.0.0.0/8; lower --nodes or --base-ip"
    )]
    TooManyNodes { nodes: usize, base_ip: Ipv4Addr },
    /// A fleet needs at least one node.
    #[error("--nodes must be at least 1")]
    NoNodes,
    /// The fleet was shut down while waiting on it.
    #[error("the simulated fleet has shut down")]
    Stopped,
    /// Pushing to a controller could not start.
    #[error(transparent)]
    Push(#[from] PushSetupError),
}

// EMFILE and ENFILE: the same numbers on Linux and macOS; io::ErrorKind has no
// stable kind for them.
const EMFILE: i32 = 24;
const ENFILE: i32 = 23;

fn bind_hint(e: &io::Error) -> &'static str {
    if matches!(e.raw_os_error(), Some(EMFILE | ENFILE)) {
        return "too many open files: every simulated kubelet needs a socket, plus one per \
                connection; raise the limit (ulimit -n) or pass fewer --nodes";
    }
    match e.kind() {
        io::ErrorKind::AddrInUse => {
            "another process uses this port; pass --port 0 or another --base-ip"
        }
        io::ErrorKind::AddrNotAvailable => {
            "this address is not on the machine; Linux binds all of 127.0.0.0/8, other systems \
             need a loopback alias per address (or --nodes 1 --base-ip 127.0.0.1)"
        }
        io::ErrorKind::PermissionDenied => {
            "ports below 1024 need privileges; pass --port 0 or a port from 1024 up"
        }
        _ => "see the cause below",
    }
}

fn control_hint(e: &io::Error) -> &'static str {
    match e.kind() {
        io::ErrorKind::AddrInUse => {
            "another process uses this port; pass another --control address (port 0 picks a free one)"
        }
        _ => "check the --control address",
    }
}

/// How many times `port: 0` tries a fresh port when another IP of the fleet
/// finds the chosen one taken.
const PORT_ATTEMPTS: usize = 5;

/// The node addresses: `base`, `base + 1`, ... skipping last octets 0 and 255,
/// all inside 127.0.0.0/8.
fn node_ips(base: Ipv4Addr, nodes: usize) -> Result<Vec<Ipv4Addr>, SimError> {
    if base.octets()[0] != 127 {
        return Err(SimError::BaseIp(format!(
            "--base-ip {base} is outside 127.0.0.0/8; simulated kubelets listen on loopback \
             addresses only (e.g. --base-ip 127.1.0.1)"
        )));
    }
    if nodes == 0 {
        return Err(SimError::NoNodes);
    }
    let too_many = || SimError::TooManyNodes {
        nodes,
        base_ip: base,
    };
    // 127/8 has fewer than 2^24 usable addresses: refuse before allocating.
    if nodes > 1 << 24 {
        return Err(too_many());
    }
    let end = u32::from(Ipv4Addr::new(127, 255, 255, 255));
    let mut ips = Vec::with_capacity(nodes);
    let mut next = u32::from(base);
    while ips.len() < nodes {
        if next > end {
            return Err(too_many());
        }
        let ip = Ipv4Addr::from(next);
        if !matches!(ip.octets()[3], 0 | 255) {
            ips.push(ip);
        }
        next += 1;
    }
    Ok(ips)
}

/// Digits in node names: at least 5, more when the count needs them.
fn name_width(nodes: usize) -> usize {
    nodes.to_string().len().max(5)
}

fn node_name(prefix: &str, index: usize, width: usize) -> String {
    format!("{prefix}{index:0width$}")
}

/// Binds every node listener. With `port == 0` node 0 picks the port and the
/// others follow; a clash with another process restarts with a new port.
fn bind_nodes(ips: &[Ipv4Addr], port: u16) -> Result<(u16, Vec<TcpListener>), SimError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match bind_all(ips, port) {
            Ok(bound) => return Ok(bound),
            Err(SimError::Bind { addr, source })
                if port == 0
                    && attempt < PORT_ATTEMPTS
                    && source.kind() == io::ErrorKind::AddrInUse =>
            {
                tracing::debug!(%addr, attempt, "port taken on a later address; trying another port");
            }
            Err(e) => return Err(e),
        }
    }
}

fn bind_all(ips: &[Ipv4Addr], port: u16) -> Result<(u16, Vec<TcpListener>), SimError> {
    let mut listeners = Vec::with_capacity(ips.len());
    let mut port = port;
    for &ip in ips {
        let addr = SocketAddr::V4(SocketAddrV4::new(ip, port));
        let listener =
            kubelet::bind_listener(addr).map_err(|source| SimError::Bind { addr, source })?;
        if port == 0 {
            port = listener
                .local_addr()
                .map_err(|source| SimError::Bind { addr, source })?
                .port();
        }
        listeners.push(listener);
    }
    Ok((port, listeners))
}

/// A running fleet. Dropping it does not stop it: cancel the token given to
/// [`Fleet::start`], then await [`Fleet::closed`].
#[derive(Debug)]
pub struct Fleet {
    nodes: Vec<SimNode>,
    port: u16,
    control_addr: SocketAddr,
    handle: FleetHandle,
    tracker: TaskTracker,
    shutdown: CancellationToken,
}

/// Binds the control endpoint; returns it with the address it took.
async fn bind_control(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), SimError> {
    let bind_error = |source| SimError::ControlBind { addr, source };
    let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
    let local = listener.local_addr().map_err(bind_error)?;
    Ok((listener, local))
}

impl Fleet {
    /// Binds every listener and the control endpoint, spawns their tasks, returns when all are listening.
    pub async fn start(
        config: FleetConfig,
        shutdown: CancellationToken,
    ) -> Result<Fleet, SimError> {
        let ips = node_ips(config.base_ip, config.nodes)?;
        let (port, listeners) = bind_nodes(&ips, config.port)?;
        let (control_listener, control_addr) = bind_control(config.control).await?;

        let mut nodes = Vec::with_capacity(ips.len());
        let mut shared = Vec::with_capacity(ips.len());
        let mut by_name = HashMap::with_capacity(ips.len());
        for ((i, ip), name) in ips.iter().enumerate().zip(config.node_names()) {
            let address = SocketAddr::V4(SocketAddrV4::new(*ip, port));
            by_name.insert(name.clone(), i);
            nodes.push(SimNode {
                name: name.clone(),
                address,
            });
            shared.push(Arc::new(Node {
                name,
                address,
                state: watch::Sender::new(KubeletState::Up),
                listening: watch::Sender::new(true),
                requests: AtomicU64::new(0),
                connections: AtomicU64::new(0),
                slow_delay: config.slow_delay,
                shutdown: shutdown.clone(),
            }));
        }
        let handle = FleetHandle {
            inner: Arc::new(FleetInner {
                nodes: shared,
                by_name,
                shutdown: shutdown.clone(),
                pusher: OnceLock::new(),
            }),
        };

        let tracker = TaskTracker::new();
        for (node, listener) in handle.inner.nodes.iter().zip(listeners) {
            tracker.spawn(kubelet::run(node.clone(), listener, tracker.clone()));
        }
        let app = control::router(handle.clone());
        let stop = shutdown.clone();
        tracker.spawn(async move {
            let served = axum::serve(control_listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await;
            if let Err(e) = served {
                tracing::warn!(error = %e, "simulated fleet control endpoint stopped");
            }
        });
        // Only spawned tasks add more tasks from here on; `wait` ends when they are done.
        tracker.close();

        tracing::info!(
            nodes = nodes.len(),
            first = %nodes[0].address,
            port,
            control = %control_addr,
            "simulated kubelet fleet listening"
        );
        Ok(Fleet {
            nodes,
            port,
            control_addr,
            handle,
            tracker,
            shutdown,
        })
    }

    /// Every node, in index order.
    pub fn nodes(&self) -> &[SimNode] {
        &self.nodes
    }

    /// The port all nodes listen on (the chosen one when configured as 0).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Where the control endpoint listens.
    pub fn control_addr(&self) -> SocketAddr {
        self.control_addr
    }

    /// A cheap handle to read and set node states.
    pub fn handle(&self) -> FleetHandle {
        self.handle.clone()
    }

    /// Makes every node push to a controller as well: Lease renewals and
    /// status updates, spread over their intervals, until the fleet stops.
    /// A fleet pushes to one controller only; a second call fails.
    pub fn start_pushing(&self, config: PushConfig) -> Result<(), SimError> {
        let inner = &self.handle.inner;
        if inner.pusher.get().is_some() {
            return Err(PushSetupError::AlreadyPushing.into());
        }
        let pusher = push::start(config, &inner.nodes, &self.tracker, self.shutdown.clone())?;
        inner
            .pusher
            .set(pusher)
            .map_err(|_| PushSetupError::AlreadyPushing)?;
        Ok(())
    }

    /// Waits until the shutdown token is cancelled and every task (listeners,
    /// connections, pushers, control endpoint) has stopped.
    pub async fn closed(self) {
        self.shutdown.cancelled().await;
        self.tracker.wait().await;
    }
}

/// Reads and sets node states; cheap to clone, usable from any thread.
#[derive(Clone)]
pub struct FleetHandle {
    inner: Arc<FleetInner>,
}

struct FleetInner {
    nodes: Vec<Arc<Node>>,
    by_name: HashMap<String, usize>,
    shutdown: CancellationToken,
    /// Set once the fleet pushes.
    pusher: OnceLock<Arc<push::Pusher>>,
}

impl fmt::Debug for FleetHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetHandle")
            .field("nodes", &self.inner.nodes.len())
            .finish()
    }
}

impl FleetHandle {
    fn node(&self, name: &str) -> Option<&Arc<Node>> {
        self.inner.by_name.get(name).map(|&i| &self.inner.nodes[i])
    }

    /// Sets one node's state; it takes effect as the node's tasks wake up
    /// (see [`FleetHandle::settled`]).
    pub fn set(&self, name: &str, state: KubeletState) -> Result<(), SimError> {
        let node = self
            .node(name)
            .ok_or_else(|| SimError::UnknownNode(name.to_owned()))?;
        self.set_timed(std::slice::from_ref(node), state);
        Ok(())
    }

    /// Sets every node's state, as a whole-site partition or recovery.
    pub fn set_all(&self, state: KubeletState) {
        self.set_timed(&self.inner.nodes, state);
    }

    /// Sets `nodes` to `state`; a pushing fleet times the change from now
    /// until every node it moved has reported it (`PushStats::last_change`).
    fn set_timed(&self, nodes: &[Arc<Node>], state: KubeletState) {
        let pusher = self.inner.pusher.get();
        let requested = tokio::time::Instant::now();
        if let Some(p) = pusher {
            p.change_requested(requested);
        }
        let mut moved = 0;
        for node in nodes {
            moved += u64::from(*node.state.borrow() != state);
            node.set(state);
        }
        if let Some(p) = pusher {
            p.change_made(requested, state, moved);
        }
    }

    /// Every pushing node drops its connection to the controller at once
    /// and reconnects, timed until each has had a heartbeat answered on its
    /// new connection (`PushStats::last_reconnect`). The nodes that owe one
    /// (those in a state that pushes); `None` if the fleet does not push.
    pub fn reconnect(&self) -> Option<u64> {
        let pusher = self.inner.pusher.get()?;
        let at = tokio::time::Instant::now();
        let pushing = self
            .inner
            .nodes
            .iter()
            .filter(|n| push::pushes(*n.state.borrow()))
            .count() as u64;
        pusher.reconnect(at, pushing);
        Some(pushing)
    }

    /// The state a node was last set to.
    pub fn state(&self, name: &str) -> Option<KubeletState> {
        self.node(name).map(|n| *n.state.borrow())
    }

    /// `/healthz` requests served (answered or hung) by that node.
    pub fn requests(&self, name: &str) -> Option<u64> {
        self.node(name).map(|n| n.requests.load(Ordering::Relaxed))
    }

    /// Connections open to that node right now, for tests.
    pub fn connections(&self, name: &str) -> Option<u64> {
        self.node(name)
            .map(|n| n.connections.load(Ordering::Relaxed))
    }

    /// What the fleet pushed so far; `None` if it does not push.
    pub fn push_stats(&self) -> Option<PushStats> {
        self.inner.pusher.get().map(|p| p.stats())
    }

    /// The fleet at a glance: nodes by state, and pushes.
    pub fn stats(&self) -> FleetStats {
        let mut states = std::collections::BTreeMap::new();
        for node in &self.inner.nodes {
            *states.entry(*node.state.borrow()).or_insert(0) += 1;
        }
        FleetStats {
            nodes: self.inner.nodes.len(),
            states,
            pushes: self.push_stats(),
        }
    }

    /// How many nodes the fleet has.
    pub fn len(&self) -> usize {
        self.inner.nodes.len()
    }

    /// Whether the fleet has no nodes (never, once started).
    pub fn is_empty(&self) -> bool {
        self.inner.nodes.is_empty()
    }

    /// One node's status, or `None` for an unknown name.
    pub fn status(&self, name: &str) -> Option<NodeStatus> {
        self.node(name).map(|n| n.status())
    }

    /// Every node's status, in index order.
    pub fn statuses(&self) -> Vec<NodeStatus> {
        self.inner.nodes.iter().map(|n| n.status()).collect()
    }

    /// Waits until the node's listener matches its state: closed when `Down`,
    /// open otherwise. Open connections are closed by their own tasks right
    /// after; a client sees that as EOF. Returns `Stopped` on shutdown.
    pub async fn settled(&self, name: &str) -> Result<(), SimError> {
        let node = self
            .node(name)
            .ok_or_else(|| SimError::UnknownNode(name.to_owned()))?;
        let mut want = node.state.subscribe();
        let mut have = node.listening.subscribe();
        // Ends when the two agree or the fleet stops; each turn waits for a change.
        loop {
            let open = *want.borrow_and_update() != KubeletState::Down;
            if *have.borrow_and_update() == open {
                return Ok(());
            }
            tokio::select! {
                _ = self.inner.shutdown.cancelled() => return Err(SimError::Stopped),
                r = want.changed() => r.map_err(|_| SimError::Stopped)?,
                r = have.changed() => r.map_err(|_| SimError::Stopped)?,
            }
        }
    }
}
