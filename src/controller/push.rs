//! What kubelets push: node status updates, Lease renewals, and (when
//! allowed) their own registration. The HTTP server sends these as [`Push`]
//! messages; each is answered once the result is as durable as it must be:
//! at once for a heartbeat (times only, checkpointed), and by the store
//! writer after the flush that holds it for any other change, so changes
//! that arrive together share one flush and the controller does not wait.

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::conditions::{never_probed, REASON_NEVER_UPDATED};
use super::operator::{OperatorFields, Preconditions};
use super::writer::{Change, Done};
use super::{Controller, StatusMode, Tracked};
use crate::model::{Address, Condition, EventKind, Lease, Micros, Node, NodeSpec, READY};
use crate::store::{Batch, StoreError};

/// Pushes waiting for the controller at most; senders wait beyond that.
pub const QUEUE: usize = 4096;

pub use crate::model::{PushedCondition, PushedStatus};

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
    /// The change could not be made durable now (a disk short of space);
    /// nothing of it was made. Retry later.
    #[error("{0}")]
    Unavailable(String),
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
            } => self.apply_status(&name, status, expected_version, reply),
            Push::CreateLease { lease, reply } => self.create_lease(lease, reply),
            Push::UpdateLease {
                lease,
                expected_generation,
                reply,
            } => self.update_lease(lease, expected_generation, reply),
            Push::Register {
                spec,
                status,
                reply,
            } => self.register_pushed(spec, status, reply).await,
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
                self.commit_ahead(Change::of(batch), Vec::new(), &[], Done::Unit(reply));
            }
        }
    }

    /// Folds a pushed status into the node. A change is sent to the writer,
    /// which answers once it is durable; a heartbeat (times only) is kept in
    /// memory, checkpointed, and answered at once.
    fn apply_status(
        &mut self,
        name: &str,
        pushed: PushedStatus,
        expected: Option<u64>,
        reply: oneshot::Sender<Result<Node, PushError>>,
    ) {
        let mode = self.config.status_mode;
        let ahead = self.is_ahead(name);
        let Some(tracked) = self.tracked.get_mut(name) else {
            let _ = reply.send(Err(PushError::NotFound {
                kind: "nodes",
                name: name.into(),
            }));
            return;
        };
        // A write on its way gets a newer version than any a client has seen.
        if expected.is_some_and(|v| ahead || v != tracked.node.resource_version) {
            let _ = reply.send(Err(PushError::Conflict {
                kind: "nodes",
                name: name.into(),
            }));
            return;
        }
        if let Err(e) = crate::validation::extra_conditions(
            tracked.node.conditions.iter().map(|c| c.kind.as_str()),
            pushed.conditions.iter().map(|c| c.kind.as_str()),
        ) {
            let _ = reply.send(Err(crate::validation::Invalid {
                kind: "Node",
                name: name.into(),
                causes: vec![e],
            }
            .into()));
            return;
        }
        let now = Instant::now();
        let wall = Micros::now();
        if heartbeat_only(&tracked.node, &pushed, mode) {
            // The common case, thousands a second: times only, folded in place.
            for pc in &pushed.conditions {
                if pc.kind == READY && mode == StatusMode::Probe {
                    continue;
                }
                let beat = pc.last_heartbeat.unwrap_or(wall);
                let c = tracked
                    .node
                    .condition_mut(&pc.kind)
                    .expect("heartbeat_only found it");
                if pc.kind == READY
                    && (c.last_heartbeat != beat || c.reason == REASON_NEVER_UPDATED)
                {
                    tracked.health.heartbeat(now);
                }
                c.last_heartbeat = beat;
            }
            count_status_heartbeat(&self.metrics);
            self.beats_changed = true;
            if !self.dirty_nodes.contains(name) {
                self.dirty_nodes.insert(name.to_string());
            }
            if !ahead {
                self.view.publish_heartbeats(&tracked.node);
            }
            let _ = reply.send(Ok(tracked.node.clone()));
            return;
        }
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
            let _ = reply.send(Err(PushError::NotFound {
                kind: "nodes",
                name: name.into(),
            }));
            return;
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
        count_status_heartbeat(&self.metrics);
        if events.is_empty() && same_but_heartbeats(&tracked.node, &node) {
            tracked.node = node.clone().into();
            self.beats_changed = true;
            self.dirty_nodes.insert(name.to_string());
            // A node with a write on its way shows once that write is durable.
            if !ahead {
                self.view.publish([node.clone()], &[]);
            }
            let _ = reply.send(Ok(node));
            return;
        }
        // Shown here at once (the next push is compared with it), to readers
        // once durable; a refusal puts the durable state back.
        tracked.node = node.clone().into();
        let mut batch = Batch::new(wall);
        batch.record(node, events);
        self.commit_ahead(
            Change::of(batch),
            vec![name.to_string()],
            &[],
            Done::Node(reply),
        );
    }

    fn create_lease(&mut self, mut lease: Lease, reply: oneshot::Sender<Result<Lease, PushError>>) {
        if !self.tracked.contains_key(&lease.name) {
            let _ = reply.send(Err(PushError::Forbidden(format!(
                "leases.coordination.k8s.io {:?} is forbidden: no node {:?} is registered",
                lease.name, lease.name
            ))));
            return;
        }
        if self.leases.contains_key(&lease.name) {
            let _ = reply.send(Err(PushError::AlreadyExists {
                kind: "leases.coordination.k8s.io",
                name: lease.name,
            }));
            return;
        }
        lease.uid = uuid::Uuid::new_v4().to_string();
        lease.created = Micros::now();
        lease.generation = 1;
        if lease.renew_time.is_some() {
            self.lease_heartbeat(&lease.name);
        }
        self.write_lease(lease, reply);
    }

    fn update_lease(
        &mut self,
        mut lease: Lease,
        expected: Option<u64>,
        reply: oneshot::Sender<Result<Lease, PushError>>,
    ) {
        let Some(current) = self.leases.get(&lease.name) else {
            let _ = reply.send(Err(PushError::NotFound {
                kind: "leases.coordination.k8s.io",
                name: lease.name,
            }));
            return;
        };
        if expected.is_some_and(|g| g != current.generation) {
            let _ = reply.send(Err(PushError::Conflict {
                kind: "leases.coordination.k8s.io",
                name: lease.name,
            }));
            return;
        }
        // A renewal is a renewTime that moved, whatever the kubelet's clock says.
        let renewed = lease.renew_time.is_some() && lease.renew_time != current.renew_time;
        lease.uid = current.uid.clone();
        lease.created = current.created;
        lease.generation = current.generation + 1;
        let times_only = same_but_renewal(&lease, current);
        if renewed {
            self.lease_heartbeat(&lease.name);
        }
        if !times_only {
            return self.write_lease(lease, reply);
        }
        // A renewal is not history: kept in memory and checkpointed.
        self.beats_changed = true;
        if !self.dirty_leases.contains(&lease.name) {
            self.dirty_leases.insert(lease.name.clone());
        }
        if !self.ahead_leases.contains_key(&lease.name) {
            self.view.publish_renewal(&lease);
        }
        if let Some(kept) = self.leases.get_mut(&lease.name) {
            kept.renew_time = lease.renew_time;
            kept.generation = lease.generation;
        }
        let _ = reply.send(Ok(lease));
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

    /// A new Lease, or one changed beyond its times: written, then answered.
    fn write_lease(&mut self, lease: Lease, reply: oneshot::Sender<Result<Lease, PushError>>) {
        let name = lease.name.clone();
        self.leases.insert(name.clone(), lease.clone());
        self.dirty_leases.remove(&name);
        let change = Change {
            leases: vec![lease.clone()],
            ..Change::default()
        };
        self.commit_ahead(change, Vec::new(), &[name], Done::Lease(lease, reply));
    }

    /// A kubelet registering its own node (`--allow-node-registration`).
    async fn register_pushed(
        &mut self,
        spec: NodeSpec,
        status: PushedStatus,
        reply: oneshot::Sender<Result<Node, PushError>>,
    ) {
        if !self.config.allow_node_registration {
            let _ = reply.send(Err(PushError::Forbidden(format!(
                "nodes {:?} is forbidden: nodekeeper does not let nodes register themselves; \
                 start it with --allow-node-registration, or list the node with --nodes or --nodes-file",
                spec.name
            ))));
            return;
        }
        if self.tracked.contains_key(&spec.name) {
            let _ = reply.send(Err(PushError::AlreadyExists {
                kind: "nodes",
                name: spec.name,
            }));
            return;
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
        // Rare, and the node must exist before its status is applied: awaited.
        let written = match self.commit(batch).await {
            Ok(written) => written,
            Err(e) => {
                let _ = reply.send(Err(e.into()));
                return;
            }
        };
        let node = written.nodes.into_iter().next().unwrap_or(node);
        let target = super::target_for(&node, self.config.probe.port);
        let name = node.name.clone();
        tracing::info!(node = %name, "node registered itself");
        self.tracked.insert(
            name.clone(),
            Tracked {
                node: node.clone().into(),
                target,
                health: super::conditions::Health::watching_from(Instant::now()),
            },
        );
        self.update_gauges();
        if status == PushedStatus::default() {
            let _ = reply.send(Ok(node));
            return;
        }
        self.apply_status(&name, status, None, reply);
    }
}

fn count_status_heartbeat(metrics: &crate::metrics::Metrics) {
    metrics
        .heartbeats
        .get_or_create(&crate::metrics::HeartbeatLabels {
            via: crate::metrics::Via::Status,
        })
        .inc();
}

/// Whether folding `pushed` into `node` changes heartbeat times at most:
/// every condition it reports is there with the same status, reason and
/// message, and what else it reports is what the node has. Exactly the
/// pushes after which [`same_but_heartbeats`] holds and no event is due.
fn heartbeat_only(node: &Node, pushed: &PushedStatus, mode: StatusMode) -> bool {
    pushed.conditions.iter().all(|pc| {
        (pc.kind == READY && mode == StatusMode::Probe)
            || node.condition(&pc.kind).is_some_and(|c| {
                c.status == pc.status && c.reason == pc.reason && c.message == pc.message
            })
    }) && pushed
        .addresses
        .as_ref()
        .is_none_or(|a| a.is_empty() || *a == node.addresses)
        && pushed
            .node_info
            .as_ref()
            .is_none_or(|i| *i == node.node_info)
        && pushed.capacity.as_ref().is_none_or(|c| *c == node.capacity)
}

/// Whether two Leases differ in their renewal time and generation at most.
fn same_but_renewal(a: &Lease, b: &Lease) -> bool {
    // Every field, so a new one is not forgotten here.
    let Lease {
        name,
        uid,
        created,
        generation: _,
        holder_identity,
        lease_duration_seconds,
        acquire_time,
        renew_time: _,
        lease_transitions,
    } = a;
    *name == b.name
        && *uid == b.uid
        && *created == b.created
        && *holder_identity == b.holder_identity
        && *lease_duration_seconds == b.lease_duration_seconds
        && *acquire_time == b.acquire_time
        && *lease_transitions == b.lease_transitions
}

/// Whether two records of a node differ in heartbeat times at most.
fn same_but_heartbeats(a: &Node, b: &Node) -> bool {
    // Every field, so a new one is not forgotten here.
    let Node {
        name,
        uid,
        created,
        resource_version,
        source,
        labels,
        annotations,
        external_id,
        provider_id,
        capacity,
        unschedulable,
        taints,
        addresses,
        conditions,
        node_info,
    } = a;
    *name == b.name
        && *uid == b.uid
        && *created == b.created
        && *resource_version == b.resource_version
        && *source == b.source
        && *labels == b.labels
        && *annotations == b.annotations
        && *external_id == b.external_id
        && *provider_id == b.provider_id
        && *capacity == b.capacity
        && *unschedulable == b.unschedulable
        && *taints == b.taints
        && *addresses == b.addresses
        && *node_info == b.node_info
        && conditions.len() == b.conditions.len()
        && conditions.iter().zip(&b.conditions).all(|(x, y)| {
            x.kind == y.kind
                && x.status == y.status
                && x.last_transition == y.last_transition
                && x.reason == y.reason
                && x.message == y.message
        })
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
    let self_registered = node.source == crate::model::SELF_REGISTERED;
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
    use crate::model::ConditionStatus;

    #[test]
    fn only_heartbeat_times_make_a_heartbeat() {
        let now = Micros(1_000_000);
        let mut a = super::super::register::new_node(
            &crate::source::static_list::static_spec(
                "edge-1".into(),
                None,
                Default::default(),
                Default::default(),
            ),
            now,
        );
        a.conditions = vec![never_probed(now)];
        let mut b = a.clone();
        b.conditions[0].last_heartbeat = Micros(2_000_000);
        assert!(same_but_heartbeats(&a, &b));
        b.conditions[0].message = "changed".into();
        assert!(!same_but_heartbeats(&a, &b));
        let mut c = a.clone();
        c.node_info.kubelet_version = "v1.33.0".into();
        assert!(!same_but_heartbeats(&a, &c));
        let mut d = a.clone();
        d.conditions.push(never_probed(now));
        assert!(!same_but_heartbeats(&a, &d));
    }

    #[test]
    fn a_heartbeat_only_push_changes_times_and_nothing_else() {
        let now = Micros(1_000_000);
        let mut node = super::super::register::new_node(
            &crate::source::static_list::static_spec(
                "edge-1".into(),
                None,
                Default::default(),
                Default::default(),
            ),
            now,
        );
        node.conditions = vec![never_probed(now)];
        node.conditions[0].status = ConditionStatus::True;
        node.conditions[0].reason = "KubeletReady".into();
        node.conditions[0].message = String::new();
        let ready = |status, reason: &str| PushedCondition {
            kind: READY.into(),
            status,
            last_heartbeat: Some(Micros(2_000_000)),
            reason: reason.into(),
            message: String::new(),
        };
        let push = |conditions| PushedStatus {
            conditions,
            ..PushedStatus::default()
        };
        let push_mode = StatusMode::Push;
        let beat = push(vec![ready(ConditionStatus::True, "KubeletReady")]);
        assert!(heartbeat_only(&node, &beat, push_mode));
        let with_info = PushedStatus {
            node_info: Some(node.node_info.clone()),
            addresses: Some(node.addresses.clone()),
            capacity: Some(node.capacity),
            ..beat.clone()
        };
        assert!(heartbeat_only(&node, &with_info, push_mode));
        // A transition, a new reason, a new condition or new node info is a change.
        let down = push(vec![ready(ConditionStatus::False, "KubeletReady")]);
        assert!(!heartbeat_only(&node, &down, push_mode));
        let reason = push(vec![ready(ConditionStatus::True, "Other")]);
        assert!(!heartbeat_only(&node, &reason, push_mode));
        let mut pressure = ready(ConditionStatus::False, "KubeletHasSufficientMemory");
        pressure.kind = "MemoryPressure".into();
        assert!(!heartbeat_only(&node, &push(vec![pressure]), push_mode));
        let mut info = node.node_info.clone();
        info.kubelet_version = "v1.33.0".into();
        let new_info = PushedStatus {
            node_info: Some(info),
            ..beat.clone()
        };
        assert!(!heartbeat_only(&node, &new_info, push_mode));
        // In probe mode the kubelet's Ready is not folded in at all.
        assert!(heartbeat_only(&node, &down, StatusMode::Probe));
    }

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
        node.source = crate::model::SELF_REGISTERED.into();
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
