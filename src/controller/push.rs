//! What kubelets push: node status updates, Lease renewals, and (when
//! allowed) their own registration. The HTTP server sends these as [`Push`]
//! messages; the controller answers each once the result is as durable as it
//! must be — at once for a heartbeat, after a flush for any condition change.

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::conditions::{never_probed, REASON_NEVER_UPDATED};
use super::operator::{OperatorFields, Preconditions};
use super::{Controller, StatusMode, Tracked};
use crate::model::{
    Address, Condition, ConditionStatus, EventKind, Lease, Micros, Node, NodeInfo, NodeSpec,
    Resources, READY,
};
use crate::store::{Batch, StoreError};

/// Pushes waiting for the controller at most; senders wait beyond that.
pub const QUEUE: usize = 4096;

/// One pushed condition, as the kubelet wrote it.
#[derive(Debug, Clone, PartialEq)]
pub struct PushedCondition {
    pub kind: String,
    pub status: ConditionStatus,
    /// The kubelet's own clock: shown, compared only with its previous value.
    pub last_heartbeat: Option<Micros>,
    pub reason: String,
    pub message: String,
}

/// The part of a node's status a kubelet reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PushedStatus {
    pub conditions: Vec<PushedCondition>,
    pub addresses: Option<Vec<Address>>,
    pub node_info: Option<NodeInfo>,
    pub capacity: Option<Resources>,
}

/// What the server asks of the controller.
pub enum Push {
    /// A node status update (PUT or PATCH of `nodes/{name}/status`).
    Status {
        name: String,
        status: PushedStatus,
        /// `metadata.resourceVersion` the writer based its update on, if it gave one.
        expected_version: Option<u64>,
        reply: oneshot::Sender<Result<Node, PushError>>,
    },
    /// Create a node's Lease.
    CreateLease {
        lease: Lease,
        reply: oneshot::Sender<Result<Lease, PushError>>,
    },
    /// Replace a node's Lease (renewal).
    UpdateLease {
        lease: Lease,
        expected_generation: Option<u64>,
        reply: oneshot::Sender<Result<Lease, PushError>>,
    },
    /// An event about a node from outside the controller (what the mirror did).
    Record {
        name: String,
        kind: EventKind,
        reply: oneshot::Sender<Result<(), PushError>>,
    },
    /// A kubelet registering its node (`POST /api/v1/nodes`).
    Register {
        spec: NodeSpec,
        status: PushedStatus,
        reply: oneshot::Sender<Result<Node, PushError>>,
    },
    /// An operator's write to the fields operators own (`PATCH`/`PUT nodes/{name}`).
    Edit {
        name: String,
        fields: OperatorFields,
        expected_version: Option<u64>,
        /// Who, as the API authenticated them.
        by: String,
        reply: oneshot::Sender<Result<Node, PushError>>,
    },
    /// An operator deleting a node (`DELETE nodes/{name}`).
    Delete {
        name: String,
        preconditions: Preconditions,
        by: String,
        reply: oneshot::Sender<Result<Node, PushError>>,
    },
}

/// Why a push was refused.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error("{kind} {name:?} not found")]
    NotFound { kind: &'static str, name: String },
    #[error("{kind} {name:?} already exists")]
    AlreadyExists { kind: &'static str, name: String },
    #[error("the object has been modified; please apply your changes to the latest version and try again")]
    Conflict { kind: &'static str, name: String },
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    Invalid(String),
    /// Fields refused, each named (a 422 with `details.causes`).
    #[error(transparent)]
    Rejected(#[from] crate::validation::Invalid),
    /// A delete's precondition does not hold.
    #[error("{0}")]
    PreconditionFailed(String),
    /// A source still lists the node: deleting it would not last.
    #[error("{0}")]
    StillListed(String),
    #[error("storing the change failed: {0}")]
    Store(#[from] StoreError),
    #[error("the controller is stopping")]
    Stopped,
}

/// The server's end of the channel.
#[derive(Clone)]
pub struct ControllerHandle {
    sender: mpsc::Sender<Push>,
}

impl ControllerHandle {
    /// A handle and the receiver the controller runs with.
    pub fn channel() -> (ControllerHandle, mpsc::Receiver<Push>) {
        let (sender, receiver) = mpsc::channel(QUEUE);
        (ControllerHandle { sender }, receiver)
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, PushError>>) -> Push,
    ) -> Result<T, PushError> {
        let (reply, answer) = oneshot::channel();
        self.sender
            .send(make(reply))
            .await
            .map_err(|_| PushError::Stopped)?;
        answer.await.map_err(|_| PushError::Stopped)?
    }

    pub async fn status(
        &self,
        name: String,
        status: PushedStatus,
        expected_version: Option<u64>,
    ) -> Result<Node, PushError> {
        self.ask(|reply| Push::Status {
            name,
            status,
            expected_version,
            reply,
        })
        .await
    }

    pub async fn create_lease(&self, lease: Lease) -> Result<Lease, PushError> {
        self.ask(|reply| Push::CreateLease { lease, reply }).await
    }

    pub async fn update_lease(
        &self,
        lease: Lease,
        expected_generation: Option<u64>,
    ) -> Result<Lease, PushError> {
        self.ask(|reply| Push::UpdateLease {
            lease,
            expected_generation,
            reply,
        })
        .await
    }

    /// Records `kind` in the node's history, durably.
    pub async fn record(&self, name: String, kind: EventKind) -> Result<(), PushError> {
        self.ask(|reply| Push::Record { name, kind, reply }).await
    }

    pub async fn register(&self, spec: NodeSpec, status: PushedStatus) -> Result<Node, PushError> {
        self.ask(|reply| Push::Register {
            spec,
            status,
            reply,
        })
        .await
    }

    /// An operator's write; answers the node as stored (unchanged if the write changed nothing).
    pub async fn edit(
        &self,
        name: String,
        fields: OperatorFields,
        expected_version: Option<u64>,
        by: String,
    ) -> Result<Node, PushError> {
        self.ask(|reply| Push::Edit {
            name,
            fields,
            expected_version,
            by,
            reply,
        })
        .await
    }

    /// An operator's delete; answers the node as it was.
    pub async fn delete(
        &self,
        name: String,
        preconditions: Preconditions,
        by: String,
    ) -> Result<Node, PushError> {
        self.ask(|reply| Push::Delete {
            name,
            preconditions,
            by,
            reply,
        })
        .await
    }
}

impl Controller {
    pub(super) async fn handle_push(&mut self, push: Push) {
        match push {
            Push::Status {
                name,
                status,
                expected_version,
                reply,
            } => {
                let _ = reply.send(self.apply_status(&name, status, expected_version).await);
            }
            Push::CreateLease { lease, reply } => {
                let _ = reply.send(self.create_lease(lease));
            }
            Push::UpdateLease {
                lease,
                expected_generation,
                reply,
            } => {
                let _ = reply.send(self.update_lease(lease, expected_generation));
            }
            Push::Register {
                spec,
                status,
                reply,
            } => {
                let _ = reply.send(self.register_pushed(spec, status).await);
            }
            Push::Edit {
                name,
                fields,
                expected_version,
                by,
                reply,
            } => {
                let _ = reply.send(
                    self.operator_edit(&name, fields, expected_version, &by)
                        .await,
                );
            }
            Push::Delete {
                name,
                preconditions,
                by,
                reply,
            } => {
                let _ = reply.send(self.operator_delete(&name, preconditions, &by).await);
            }
            Push::Record { name, kind, reply } => {
                let mut batch = Batch::new(Micros::now());
                batch.node_event(&name, kind);
                let _ = reply.send(
                    self.commit(batch)
                        .await
                        .map(|_| ())
                        .map_err(PushError::from),
                );
            }
        }
    }

    /// Folds a pushed status into the node. A status change is written with
    /// its event and flushed before the answer; a heartbeat is kept in memory
    /// and written with the next batch.
    async fn apply_status(
        &mut self,
        name: &str,
        pushed: PushedStatus,
        expected: Option<u64>,
    ) -> Result<Node, PushError> {
        let mode = self.config.status_mode;
        let Some(tracked) = self.tracked.get_mut(name) else {
            return Err(PushError::NotFound {
                kind: "nodes",
                name: name.into(),
            });
        };
        if expected.is_some_and(|v| v != tracked.node.resource_version) {
            return Err(PushError::Conflict {
                kind: "nodes",
                name: name.into(),
            });
        }
        crate::validation::extra_conditions(
            tracked.node.conditions.iter().map(|c| c.kind.as_str()),
            pushed.conditions.iter().map(|c| c.kind.as_str()),
        )
        .map_err(|e| crate::validation::Invalid {
            kind: "Node",
            name: name.into(),
            causes: vec![e],
        })?;
        let now = Instant::now();
        let wall = Micros::now();
        let mut node = tracked.node.clone();
        let mut events = Vec::new();
        for pc in pushed.conditions {
            // In probe mode the kubelet's word on Ready is not what decides it.
            if pc.kind == READY && mode == StatusMode::Probe {
                continue;
            }
            let beat = pc.last_heartbeat.unwrap_or(wall);
            let previous = node.condition(&pc.kind).cloned();
            if pc.kind == READY
                && previous
                    .as_ref()
                    .is_none_or(|c| c.last_heartbeat != beat || c.reason == REASON_NEVER_UPDATED)
            {
                // A heartbeat is a change of the kubelet's own timestamp; it
                // is stamped on our clock and never compared with it.
                tracked.health.heartbeat(now);
            }
            match previous {
                Some(c) if c.status == pc.status => {
                    let c = node.condition_mut(&pc.kind).expect("found above");
                    c.last_heartbeat = beat;
                    c.reason = pc.reason;
                    c.message = pc.message;
                }
                previous => {
                    events.push(EventKind::ConditionChanged {
                        condition: pc.kind.clone(),
                        from: previous.as_ref().map(|c| c.status),
                        to: pc.status,
                        reason: pc.reason.clone(),
                        message: pc.message.clone(),
                    });
                    let updated = Condition {
                        kind: pc.kind.clone(),
                        status: pc.status,
                        last_heartbeat: beat,
                        last_transition: wall,
                        reason: pc.reason,
                        message: pc.message,
                    };
                    match node.condition_mut(&pc.kind) {
                        Some(c) => *c = updated,
                        None => node.conditions.push(updated),
                    }
                }
            }
        }
        if let Some(addresses) = pushed.addresses {
            let others = |ip: &str| {
                self.tracked
                    .values()
                    .find(|t| {
                        t.node.name != name && t.node.addresses.iter().any(|a| a.address == ip)
                    })
                    .map(|t| t.node.name.clone())
            };
            match addresses_to_take(&node, addresses, others) {
                AddressDecision::Keep => {}
                AddressDecision::Ignore(why) => {
                    tracing::debug!(node = %name, "pushed addresses ignored: {why}");
                }
                AddressDecision::Take(addresses) => {
                    events.push(EventKind::AddressesChanged {
                        from: node.addresses.clone(),
                        to: addresses.clone(),
                    });
                    node.addresses = addresses;
                }
            }
        }
        let Some(tracked) = self.tracked.get_mut(name) else {
            return Err(PushError::NotFound {
                kind: "nodes",
                name: name.into(),
            });
        };
        if events
            .iter()
            .any(|e| matches!(e, EventKind::AddressesChanged { .. }))
        {
            tracked.target = super::target_for(&node, self.config.probe.port);
        }
        if let Some(info) = pushed.node_info {
            node.node_info = info;
        }
        if let Some(capacity) = pushed.capacity {
            node.capacity = capacity;
        }
        self.metrics
            .heartbeats
            .get_or_create(&crate::metrics::HeartbeatLabels {
                via: crate::metrics::Via::Status,
            })
            .inc();
        if events.is_empty() {
            if node != tracked.node {
                tracked.node = node.clone();
                self.dirty_nodes.insert(name.to_string());
                self.view.publish([node.clone()], &[]);
            }
            return Ok(node);
        }
        for e in &events {
            if let EventKind::ConditionChanged {
                condition,
                from,
                to,
                reason,
                ..
            } = e
            {
                tracing::info!(node = %name, %condition, from = ?from, to = %to, reason, "pushed status changed");
            }
        }
        let mut batch = Batch::new(wall);
        batch.record(node, events);
        let written = self.commit(batch).await?;
        self.update_gauges();
        written.nodes.into_iter().next().ok_or(PushError::NotFound {
            kind: "nodes",
            name: name.into(),
        })
    }

    fn create_lease(&mut self, mut lease: Lease) -> Result<Lease, PushError> {
        if !self.tracked.contains_key(&lease.name) {
            return Err(PushError::Forbidden(format!(
                "leases.coordination.k8s.io {:?} is forbidden: no node {:?} is registered",
                lease.name, lease.name
            )));
        }
        if self.leases.contains_key(&lease.name) {
            return Err(PushError::AlreadyExists {
                kind: "leases.coordination.k8s.io",
                name: lease.name,
            });
        }
        lease.uid = uuid::Uuid::new_v4().to_string();
        lease.created = Micros::now();
        lease.generation = 1;
        if lease.renew_time.is_some() {
            self.lease_heartbeat(&lease.name);
        }
        self.store_lease(lease.clone());
        Ok(lease)
    }

    fn update_lease(
        &mut self,
        mut lease: Lease,
        expected: Option<u64>,
    ) -> Result<Lease, PushError> {
        let Some(current) = self.leases.get(&lease.name) else {
            return Err(PushError::NotFound {
                kind: "leases.coordination.k8s.io",
                name: lease.name,
            });
        };
        if expected.is_some_and(|g| g != current.generation) {
            return Err(PushError::Conflict {
                kind: "leases.coordination.k8s.io",
                name: lease.name,
            });
        }
        // A renewal is a renewTime that moved, whatever the kubelet's clock says.
        let renewed = lease.renew_time.is_some() && lease.renew_time != current.renew_time;
        lease.uid = current.uid.clone();
        lease.created = current.created;
        lease.generation = current.generation + 1;
        if renewed {
            self.lease_heartbeat(&lease.name);
        }
        self.store_lease(lease.clone());
        Ok(lease)
    }

    fn lease_heartbeat(&mut self, name: &str) {
        self.metrics
            .heartbeats
            .get_or_create(&crate::metrics::HeartbeatLabels {
                via: crate::metrics::Via::Lease,
            })
            .inc();
        // In probe mode a Lease is kept but says nothing about health: probes decide.
        if self.config.status_mode == StatusMode::Probe {
            return;
        }
        if let Some(t) = self.tracked.get_mut(name) {
            t.health.heartbeat(Instant::now());
        }
    }

    fn store_lease(&mut self, lease: Lease) {
        self.dirty_leases.insert(lease.name.clone());
        self.view.publish_leases([lease.clone()], &[]);
        self.leases.insert(lease.name.clone(), lease);
    }

    /// A kubelet registering its own node (`--allow-node-registration`).
    async fn register_pushed(
        &mut self,
        spec: NodeSpec,
        status: PushedStatus,
    ) -> Result<Node, PushError> {
        if !self.config.allow_node_registration {
            return Err(PushError::Forbidden(format!(
                "nodes {:?} is forbidden: nodekeeper does not let nodes register themselves; \
                 start it with --allow-node-registration, or list the node with --nodes or --nodes-file",
                spec.name
            )));
        }
        if self.tracked.contains_key(&spec.name) {
            return Err(PushError::AlreadyExists {
                kind: "nodes",
                name: spec.name,
            });
        }
        let wall = Micros::now();
        let mut node = super::register::new_node(&spec, wall);
        node.conditions = vec![never_probed(wall)];
        let mut batch = Batch::new(wall);
        batch.record(
            node.clone(),
            [EventKind::Registered {
                node: Box::new(node.clone()),
            }],
        );
        let written = self.commit(batch).await?;
        let node = written.nodes.into_iter().next().unwrap_or(node);
        let target = super::target_for(&node, self.config.probe.port);
        let name = node.name.clone();
        tracing::info!(node = %name, "node registered itself");
        self.tracked.insert(
            name.clone(),
            Tracked {
                node,
                target,
                health: super::conditions::Health::watching_from(Instant::now()),
            },
        );
        self.update_gauges();
        if status == PushedStatus::default() {
            return self
                .tracked
                .get(&name)
                .map(|t| t.node.clone())
                .ok_or(PushError::NotFound {
                    kind: "nodes",
                    name,
                });
        }
        self.apply_status(&name, status, None).await
    }
}

/// What a node takes of the addresses it pushed.
#[derive(Debug, PartialEq)]
pub(super) enum AddressDecision {
    /// The same as it has (or nothing usable): nothing to do.
    Keep,
    /// Ignored, and why (the source's addresses win, or another node's are claimed).
    Ignore(String),
    Take(Vec<Address>),
}

/// The rule for pushed addresses: an address the node's source gave (the
/// static list, an inventory or cloud, or a lookup of its name) wins over a
/// pushed one, so a node's token cannot move its node onto another
/// kubelet. A node that registered itself, or whose source gave no address,
/// takes what it pushes, unless that claims an address another node has.
pub(super) fn addresses_to_take(
    node: &Node,
    pushed: Vec<Address>,
    owner_of: impl Fn(&str) -> Option<String>,
) -> AddressDecision {
    if pushed.is_empty() || pushed == node.addresses {
        return AddressDecision::Keep;
    }
    let self_registered = node.source == crate::kube_input::SELF_REGISTERED;
    if !self_registered && !node.addresses.is_empty() {
        return AddressDecision::Ignore(format!(
            "the node's addresses come from its source ({})",
            node.source
        ));
    }
    for a in &pushed {
        if let Some(other) = owner_of(&a.address) {
            return AddressDecision::Ignore(format!(
                "{} {} is the address of node {other:?}",
                a.kind.as_str(),
                a.address
            ));
        }
    }
    AddressDecision::Take(pushed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::AddressKind;

    fn ip(address: &str) -> Address {
        Address {
            kind: AddressKind::InternalIP,
            address: address.into(),
        }
    }

    #[test]
    fn the_source_address_wins_over_a_pushed_one() {
        let mut node = crate::store::records::tests::sample_node();
        node.addresses = vec![ip("127.0.0.1")];
        let nobody = |_: &str| None;
        assert!(matches!(
            addresses_to_take(&node, vec![ip("127.0.0.2")], nobody),
            AddressDecision::Ignore(why) if why.contains("static")
        ));
        assert_eq!(
            addresses_to_take(&node, node.addresses.clone(), nobody),
            AddressDecision::Keep
        );
        assert_eq!(
            addresses_to_take(&node, vec![], nobody),
            AddressDecision::Keep
        );
        // A static host name that never resolved takes what its kubelet says.
        node.addresses.clear();
        assert_eq!(
            addresses_to_take(&node, vec![ip("127.0.0.2")], nobody),
            AddressDecision::Take(vec![ip("127.0.0.2")])
        );
    }

    #[test]
    fn a_self_registered_node_moves_but_never_onto_another_node() {
        let mut node = crate::store::records::tests::sample_node();
        node.source = crate::kube_input::SELF_REGISTERED.into();
        node.addresses = vec![ip("127.0.0.1")];
        assert_eq!(
            addresses_to_take(&node, vec![ip("127.0.0.3")], |_| None),
            AddressDecision::Take(vec![ip("127.0.0.3")])
        );
        let b_has = |a: &str| (a == "127.0.0.2").then(|| "b".to_string());
        assert!(matches!(
            addresses_to_take(&node, vec![ip("127.0.0.2")], b_has),
            AddressDecision::Ignore(why) if why.contains("\"b\"")
        ));
    }
}
