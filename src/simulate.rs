//! What `run --simulate N` asks of a simulator. The simulated kubelets are a
//! crate of their own (`nodekeeper-sim`, which uses this library), so the
//! library only names what `run` needs; the binary hands in a [`Simulator`].

use std::error::Error;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;

use tokio_util::sync::CancellationToken;

/// A future the simulator returns, boxed so [`Simulator`] can be a trait object.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a simulated fleet did not start (the simulator's own error, boxed).
pub type StartError = Box<dyn Error + Send + Sync>;

/// The fleet `--simulate`, `--simulate-base-ip` and `--simulate-control` ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimulateRequest {
    /// How many kubelets.
    pub nodes: usize,
    /// The first one's loopback address; the others follow it.
    pub base_ip: Ipv4Addr,
    /// Where the fleet's control endpoint listens (`nodekeeper sim set`).
    pub control: SocketAddr,
}

/// One simulated kubelet, as the controller registers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimulatedNode {
    pub name: String,
    pub ip: IpAddr,
}

/// Starts the kubelets of a [`SimulateRequest`], in this process.
pub trait Simulator: Send + Sync {
    /// Starts the fleet; it stops when `shutdown` is cancelled.
    fn start(
        &self,
        request: SimulateRequest,
        shutdown: CancellationToken,
    ) -> BoxFuture<'_, Result<Box<dyn SimulatedFleet>, StartError>>;
}

/// A running simulated fleet: what `run` registers, probes and reports.
pub trait SimulatedFleet: Send {
    /// Every kubelet, in order.
    fn nodes(&self) -> Vec<SimulatedNode>;
    /// The one port every kubelet listens on.
    fn port(&self) -> u16;
    /// The control endpoint's address.
    fn control_addr(&self) -> SocketAddr;
    /// Waits until every task of the fleet has stopped (after its shutdown).
    fn closed(self: Box<Self>) -> BoxFuture<'static, ()>;
}
