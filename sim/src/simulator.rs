//! The simulator `nodekeeper run --simulate` starts its kubelets with: a
//! [`Fleet`] in the controller's process, behind the library's
//! [`Simulator`] and [`SimulatedFleet`].

use std::net::SocketAddr;

use nodekeeper::simulate::{
    BoxFuture, SimulateRequest, SimulatedFleet, SimulatedNode, Simulator, StartError,
};
use tokio_util::sync::CancellationToken;

use crate::{Fleet, FleetConfig};

/// Starts a [`Fleet`] in this process, every kubelet on one port of its choosing.
#[derive(Clone, Copy, Debug, Default)]
pub struct InProcess;

impl Simulator for InProcess {
    fn start(
        &self,
        request: SimulateRequest,
        shutdown: CancellationToken,
    ) -> BoxFuture<'_, Result<Box<dyn SimulatedFleet>, StartError>> {
        let config = FleetConfig {
            nodes: request.nodes,
            base_ip: request.base_ip,
            port: 0,
            control: request.control,
            ..FleetConfig::default()
        };
        Box::pin(async move {
            let fleet = Fleet::start(config, shutdown).await?;
            Ok(Box::new(fleet) as Box<dyn SimulatedFleet>)
        })
    }
}

impl SimulatedFleet for Fleet {
    fn nodes(&self) -> Vec<SimulatedNode> {
        Fleet::nodes(self)
            .iter()
            .map(|n| SimulatedNode {
                name: n.name.clone(),
                ip: n.address.ip(),
            })
            .collect()
    }

    fn port(&self) -> u16 {
        Fleet::port(self)
    }

    fn control_addr(&self) -> SocketAddr {
        Fleet::control_addr(self)
    }

    fn closed(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(Fleet::closed(*self))
    }
}
