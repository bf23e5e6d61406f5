//! What kubelets push: node status updates, Lease renewals, and (when
//! allowed) their own registration. The HTTP server sends these as [`WriteRequest`]
//! messages; each is answered once the result is as durable as it must be:
//! at once for a heartbeat (times only, checkpointed), and by the store
//! writer after the flush that holds it for any other change, so changes
//! that arrive together share one flush and the controller does not wait.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

mod fold;

use fold::{fold_status, heartbeat_only, ready_beat, set_heartbeat_times, Fold, FoldRules};

use super::conditions::never_probed;
use super::operator::{OperatorFields, Preconditions};
use super::writer::{Change, Done};
use super::{Controller, StatusMode, Tracked};
use crate::metrics::Via;
use crate::model::{EventKind, EvictionMode, Lease, Micros, Node, NodeObject, NodeSpec};
use crate::store::{Batch, StoreError};

/// Pushes waiting for the controller at most; senders wait beyond that.
pub const QUEUE: usize = 4096;

pub use crate::model::{PushedCondition, PushedStatus};

/// How a node status update is answered: a heartbeat at once, with the
/// node as the controller holds it (shared, not copied: thousands a
/// second), a change once the write that holds it is durable.
pub enum StatusAnswer {
    Now(Arc<Node>),
    /// The store writer answers with the node as written.
    Durable(oneshot::Receiver<Result<Node, PushError>>),
}

/// Where the answer to a write goes.
pub type Reply<T> = oneshot::Sender<Result<T, PushError>>;

/// A write the server asks of the controller, with the channel its answer
/// goes back on: what kubelets push (status, Leases, Events, registration,
/// their CSINodes and mirror pods), operators' edits and deletes, and what
/// the mirror records.
pub enum WriteRequest {
    /// A node status update (PUT or PATCH of `nodes/{name}/status`).
    Status {
        name: String,
        status: PushedStatus,
        /// `metadata.resourceVersion` the writer based its update on, if it gave one.
        expected_version: Option<u64>,
        reply: Reply<StatusAnswer>,
    },
    /// Create a node's Lease.
    CreateLease { lease: Lease, reply: Reply<Lease> },
    /// Replace a node's Lease (renewal).
    UpdateLease {
        lease: Lease,
        expected_generation: Option<u64>,
        reply: Reply<Lease>,
    },
    /// An Event a node's kubelet posted (`POST .../events`), kept in the
    /// node's history within the node's budget.
    KubeletEvent {
        name: String,
        kind: EventKind,
        reply: Reply<()>,
    },
    /// An event about a node from outside the controller (what the mirror did).
    Record {
        name: String,
        kind: EventKind,
        reply: Reply<()>,
    },
    /// A kubelet registering its node (`POST /api/v1/nodes`).
    Register {
        spec: NodeSpec,
        /// The annotations it registers with (the source annotation aside).
        annotations: BTreeMap<String, String>,
        status: PushedStatus,
        reply: Reply<Node>,
    },
    /// An operator's write to the fields operators own (`PATCH`/`PUT nodes/{name}`).
    Edit {
        name: String,
        fields: OperatorFields,
        expected_version: Option<u64>,
        /// Who, as the API authenticated them.
        by: String,
        reply: Reply<Node>,
    },
    /// A kubelet's write of an object kept with its node (its CSINode).
    WriteObject {
        object: NodeObject,
        write: ObjectWrite,
        /// The resource as errors name it (`csinodes.storage.k8s.io`).
        kind: &'static str,
        /// What the object holds, for its history.
        summary: String,
        reply: Reply<NodeObject>,
    },
    /// An operator deleting a node (`DELETE nodes/{name}`).
    Delete {
        name: String,
        preconditions: Preconditions,
        by: String,
        reply: Reply<Node>,
    },
}

/// The most objects of one resource a node keeps: a kubelet's default
/// `maxPods` (`pkg/kubelet/apis/config/v1beta1/defaults.go`), so every
/// static pod of a node fits.
pub const MAX_OBJECTS_PER_NODE: usize = 110;

/// What a write of an object kept with a node does; `expected` is the
/// generation the writer read, if it gave one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectWrite {
    Create,
    Replace { expected: Option<u64> },
    Delete { expected: Option<u64> },
}

/// Leases, as errors name them.
const LEASES: &str = "leases.coordination.k8s.io";

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
    /// Over a budget; may be tried again after `retry_after` seconds.
    #[error("{message}")]
    TooManyRequests { message: String, retry_after: u64 },
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

impl PushError {
    pub fn not_found(kind: &'static str, name: impl Into<String>) -> PushError {
        let name = name.into();
        PushError::NotFound { kind, name }
    }

    pub fn already_exists(kind: &'static str, name: impl Into<String>) -> PushError {
        let name = name.into();
        PushError::AlreadyExists { kind, name }
    }

    pub fn conflict(kind: &'static str, name: impl Into<String>) -> PushError {
        let name = name.into();
        PushError::Conflict { kind, name }
    }
}

/// The server's end of the channel.
#[derive(Clone)]
pub struct ControllerHandle {
    sender: mpsc::Sender<WriteRequest>,
}

impl ControllerHandle {
    /// A handle and the receiver the controller runs with.
    pub fn channel() -> (ControllerHandle, mpsc::Receiver<WriteRequest>) {
        let (sender, receiver) = mpsc::channel(QUEUE);
        (ControllerHandle { sender }, receiver)
    }

    /// Sends the write `request` makes with the channel its answer comes
    /// back on, and awaits the answer:
    /// `write(|reply| WriteRequest::Record { name, kind, reply })`.
    pub async fn write<T>(
        &self,
        request: impl FnOnce(Reply<T>) -> WriteRequest,
    ) -> Result<T, PushError> {
        let (reply, answer) = oneshot::channel();
        self.sender
            .send(request(reply))
            .await
            .map_err(|_| PushError::Stopped)?;
        answer.await.map_err(|_| PushError::Stopped)?
    }

    /// A node status update; answers the node as it now is, shared with
    /// the controller's record for a heartbeat (only read it).
    pub async fn status(
        &self,
        name: String,
        status: PushedStatus,
        expected_version: Option<u64>,
    ) -> Result<Arc<Node>, PushError> {
        let answer = self
            .write(|reply| WriteRequest::Status {
                name,
                status,
                expected_version,
                reply,
            })
            .await?;
        match answer {
            StatusAnswer::Now(node) => Ok(node),
            StatusAnswer::Durable(written) => {
                written.await.map_err(|_| PushError::Stopped)?.map(Arc::new)
            }
        }
    }

    /// A kubelet's new Lease; answers it as stored.
    pub async fn create_lease(&self, lease: Lease) -> Result<Lease, PushError> {
        self.write(|reply| WriteRequest::CreateLease { lease, reply })
            .await
    }

    /// A kubelet's Lease replaced (a renewal, the heartbeat's other half);
    /// answers it as stored.
    pub async fn update_lease(
        &self,
        lease: Lease,
        expected_generation: Option<u64>,
    ) -> Result<Lease, PushError> {
        self.write(|reply| WriteRequest::UpdateLease {
            lease,
            expected_generation,
            reply,
        })
        .await
    }
}

impl Controller {
    pub(super) async fn handle_push(&mut self, push: WriteRequest) {
        match push {
            WriteRequest::Status {
                name,
                status,
                expected_version,
                reply,
            } => self.apply_status(&name, status, expected_version, StatusReply::Push(reply)),
            WriteRequest::CreateLease { lease, reply } => self.create_lease(lease, reply),
            WriteRequest::UpdateLease {
                lease,
                expected_generation,
                reply,
            } => self.update_lease(lease, expected_generation, reply),
            WriteRequest::Register {
                spec,
                annotations,
                status,
                reply,
            } => self.register_pushed(spec, annotations, status, reply).await,
            WriteRequest::Edit {
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
            WriteRequest::Delete {
                name,
                preconditions,
                by,
                reply,
            } => {
                let _ = reply.send(self.operator_delete(&name, preconditions, &by).await);
            }
            WriteRequest::WriteObject {
                object,
                write,
                kind,
                summary,
                reply,
            } => {
                let _ = reply.send(self.write_object(object, write, kind, summary).await);
            }
            WriteRequest::KubeletEvent { name, kind, reply } => {
                if let Err(e) = self.take_event_budget(&name) {
                    let _ = reply.send(Err(e));
                    return;
                }
                let mut batch = Batch::new(Micros::now());
                batch.node_event(&name, kind);
                self.commit_ahead(Change::of(batch), Vec::new(), &[], Done::Unit(reply));
            }
            WriteRequest::Record { name, kind, reply } => {
                let mut batch = Batch::new(Micros::now());
                batch.node_event(&name, kind);
                self.commit_ahead(Change::of(batch), Vec::new(), &[], Done::Unit(reply));
            }
        }
    }

    /// Folds a pushed status into the node (decided by [`fold_status`]). A
    /// change is sent to the writer, which answers once it is durable; a
    /// heartbeat (times only) is kept in memory, checkpointed, and answered
    /// at once.
    fn apply_status(
        &mut self,
        name: &str,
        pushed: PushedStatus,
        expected: Option<u64>,
        reply: StatusReply,
    ) {
        let ahead = self.is_ahead(name);
        let mode = self.config.status_mode;
        let Some(tracked) = self.tracked.get_mut(name) else {
            return reply.send(Err(PushError::not_found("nodes", name)));
        };
        // A write on its way gets a newer version than any a client has seen.
        if expected.is_some_and(|v| ahead || v != tracked.node.resource_version) {
            return reply.send(Err(PushError::conflict("nodes", name)));
        }
        let wall = Micros::now();
        if !heartbeat_only(&tracked.node, &pushed, mode) {
            return self.apply_status_change(name, pushed, ahead, wall, reply);
        }
        // The common case, thousands a second: times only, set in place
        // (what `fold_status` folds a heartbeat to; it adds no condition,
        // so it cannot add too many).
        if ready_beat(&tracked.node, &pushed, mode, wall) {
            tracked.health.heartbeat(self.clock.now());
        }
        let moved = set_heartbeat_times(&mut tracked.node, &pushed, mode, wall);
        self.metrics.heartbeat_counter(Via::Status).inc();
        // A push that changes nothing, not even a time, leaves nothing to
        // publish or checkpoint.
        if moved {
            // A node with a write on its way shows once that write is durable.
            if !ahead {
                self.view.publish_heartbeats(&tracked.node);
            }
            self.beats_changed = true;
            tracked.beats_unwritten = true;
        }
        reply.send(Ok(tracked.node.share()));
    }

    /// [`Controller::apply_status`] for a push that is more than a
    /// heartbeat: folded by [`fold_status`], and written unless it changes
    /// times only after all (pushed addresses that were not taken, say).
    fn apply_status_change(
        &mut self,
        name: &str,
        pushed: PushedStatus,
        ahead: bool,
        wall: Micros,
        reply: StatusReply,
    ) {
        let Some(tracked) = self.tracked.get(name) else {
            return reply.send(Err(PushError::not_found("nodes", name)));
        };
        let eviction = self.config.eviction.mode;
        let rules = FoldRules {
            mode: self.config.status_mode,
            taints: (eviction != EvictionMode::None)
                .then(|| (self.evictor.is_evicted(name), eviction)),
        };
        let owner_of = |ip: &str| {
            self.tracked
                .values()
                .find(|t| t.node.name != name && t.node.addresses.iter().any(|a| a.address == ip))
                .map(|t| t.node.name.clone())
        };
        let folded = match fold_status(&tracked.node, pushed, &rules, wall, owner_of) {
            Ok(folded) => folded,
            Err(invalid) => return reply.send(Err(invalid.into())),
        };
        self.metrics.heartbeat_counter(Via::Status).inc();
        if let Some(why) = &folded.addresses_ignored {
            tracing::debug!(node = %name, "pushed addresses ignored: {why}");
        }
        let tracked = self.tracked.get_mut(name).expect("found above");
        if folded.ready_beat {
            tracked.health.heartbeat(self.clock.now());
        }
        let node = match folded.fold {
            Fold::Write {
                node,
                events,
                addresses_moved,
            } => {
                if addresses_moved {
                    tracked.target = super::target_for(&node, self.config.probe.port);
                }
                // Shown here at once (the next push is compared with it), to
                // readers once durable; a refusal puts the durable state back.
                tracked.node = node.clone().into();
                let mut batch = Batch::new(wall);
                batch.record(node, events);
                let done = reply.when_durable();
                return self.commit_ahead(Change::of(batch), vec![name.to_string()], &[], done);
            }
            Fold::Beats(beats) => {
                for (index, beat) in beats {
                    tracked.node.conditions[index].last_heartbeat = beat;
                }
                if !ahead {
                    self.view.publish_heartbeats(&tracked.node);
                }
                tracked.node.share()
            }
            Fold::Quiet(node) => {
                let node = Arc::new(node);
                tracked.node = node.clone().into();
                if !ahead {
                    self.view.publish_shared([node.clone()], &[]);
                }
                node
            }
        };
        self.beats_changed = true;
        tracked.beats_unwritten = true;
        reply.send(Ok(node));
    }

    fn create_lease(&mut self, mut lease: Lease, reply: Reply<Lease>) {
        if !self.tracked.contains_key(&lease.name) {
            let _ = reply.send(Err(PushError::Forbidden(format!(
                "{LEASES} {:?} is forbidden: no node {:?} is registered, and \
                 nodekeeper keeps a Lease with its node: register the node first, as a kubelet \
                 does (it creates its Lease owned by its node, once it can read the node)",
                lease.name, lease.name
            ))));
            return;
        }
        if self.leases.contains_key(&lease.name) {
            let _ = reply.send(Err(PushError::already_exists(LEASES, lease.name)));
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

    fn update_lease(&mut self, mut lease: Lease, expected: Option<u64>, reply: Reply<Lease>) {
        let Some(current) = self.leases.get_mut(&lease.name) else {
            let _ = reply.send(Err(PushError::not_found(LEASES, lease.name)));
            return;
        };
        if expected.is_some_and(|g| g != current.generation) {
            let _ = reply.send(Err(PushError::conflict(LEASES, lease.name)));
            return;
        }
        // A renewal is a renewTime that moved, whatever the kubelet's clock says.
        let renewed = lease.renew_time.is_some() && lease.renew_time != current.renew_time;
        lease.uid = current.uid.clone();
        lease.created = current.created;
        lease.generation = current.generation + 1;
        let times_only = same_but_renewal(&lease, current);
        if times_only {
            // A renewal is not history: kept in memory and checkpointed.
            current.renew_time = lease.renew_time;
            current.generation = lease.generation;
        }
        if renewed {
            self.lease_heartbeat(&lease.name);
        }
        if !times_only {
            return self.write_lease(lease, reply);
        }
        self.beats_changed = true;
        if !self.dirty_leases.contains(&lease.name) {
            self.dirty_leases.insert(lease.name.clone());
        }
        if !self.ahead_leases.contains_key(&lease.name) {
            self.view.publish_renewal(&lease);
        }
        let _ = reply.send(Ok(lease));
    }

    fn lease_heartbeat(&mut self, name: &str) {
        self.metrics.heartbeat_counter(Via::Lease).inc();
        // In probe mode a Lease is kept but says nothing about health: probes decide.
        if self.config.status_mode == StatusMode::Probe {
            return;
        }
        if let Some(t) = self.tracked.get_mut(name) {
            t.health.heartbeat(self.clock.now());
        }
    }

    /// A new Lease, or one changed beyond its times: written, then answered.
    fn write_lease(&mut self, lease: Lease, reply: Reply<Lease>) {
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
        annotations: BTreeMap<String, String>,
        status: PushedStatus,
        reply: Reply<Node>,
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
            let _ = reply.send(Err(PushError::already_exists("nodes", spec.name)));
            return;
        }
        let wall = Micros::now();
        let mut node = super::register::new_node(&spec, wall);
        node.annotations = annotations;
        node.conditions = vec![never_probed(wall)];
        if let Err(e) = crate::validation::node_size(&node, None) {
            let invalid = crate::validation::Invalid::node(&node.name, e);
            let _ = reply.send(Err(invalid.into()));
            return;
        }
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
        let name = node.name.clone();
        tracing::info!(node = %name, "node registered itself");
        let health = super::conditions::Health::watching_from(self.clock.now());
        let tracked = Tracked::new(node.clone().into(), health, self.config.probe.port);
        self.tracked.insert(name.clone(), tracked);
        // A source may name it and have failed to register it: no longer waited for.
        self.unregistered.registered([name.as_str()]);
        self.report_unregistered();
        self.update_gauges();
        if status == PushedStatus::default() {
            let _ = reply.send(Ok(node));
            return;
        }
        self.apply_status(&name, status, None, StatusReply::Register(reply));
    }
}

/// Events a node's kubelet may post at once, and how many a second after:
/// a kubelet sends about a dozen at start and a few an hour after, and
/// limits itself (client-go `tools/record/events_cache.go`: 25 at once per
/// object, then one per 5 minutes), so this holds a kubelet that misbehaves
/// without touching one that does not.
const EVENT_BURST: u32 = 50;
const EVENTS_PER_SECOND: f64 = 0.2;

impl Controller {
    /// Takes one of node `name`'s Event tokens: only a registered node has
    /// a budget (its history is where its Events are kept).
    fn take_event_budget(&mut self, name: &str) -> Result<(), PushError> {
        if !self.tracked.contains_key(name) {
            self.event_budgets.remove(name);
            return Err(PushError::Forbidden(format!(
                "events are kept in a node's history, and no node {name:?} is registered"
            )));
        }
        let now = self.clock.now();
        // Budgets of nodes gone since are dropped as the map grows.
        if self.event_budgets.len() > self.tracked.len() {
            let tracked = &self.tracked;
            self.event_budgets.retain(|n, _| tracked.contains_key(n));
        }
        let bucket = self
            .event_budgets
            .entry(name.to_string())
            .or_insert_with(|| {
                crate::token_bucket::TokenBucket::new(EVENTS_PER_SECOND, EVENT_BURST, now)
            });
        bucket.try_acquire(now).map_err(|wait| {
            let retry_after = wait.map_or(60, |w| w.as_secs().max(1));
            PushError::TooManyRequests {
                message: format!(
                    "node {name:?} posted more than {EVENT_BURST} events at once; nodekeeper \
                     keeps {EVENTS_PER_SECOND} a second after that"
                ),
                retry_after,
            }
        })
    }

    /// A kubelet's write of an object kept with its node: checked against
    /// the object as published, recorded in the node's history, answered
    /// once durable. Rare (a CSINode is written at a kubelet's start and
    /// when its drivers change): awaited, so the next write is checked
    /// against this one.
    async fn write_object(
        &mut self,
        mut object: NodeObject,
        write: ObjectWrite,
        kind: &'static str,
        summary: String,
    ) -> Result<NodeObject, PushError> {
        if !self.tracked.contains_key(&object.node) {
            return Err(PushError::Forbidden(format!(
                "{kind} {:?} is forbidden: no node {:?} is registered, and nodekeeper keeps \
                 this object with its node",
                object.name, object.node
            )));
        }
        let key = object.key();
        let current = self.view.node_object(&key);
        let stale = |expected: Option<u64>, current: &NodeObject| {
            expected.is_some_and(|g| g != current.generation)
        };
        let name = object.name.clone();
        let (action, mut change) = match (write, current) {
            (ObjectWrite::Create, Some(_)) => return Err(PushError::AlreadyExists { kind, name }),
            (ObjectWrite::Create, None)
                if self.view.count_node_objects(&object.resource, &object.node)
                    >= MAX_OBJECTS_PER_NODE =>
            {
                return Err(PushError::Forbidden(format!(
                    "{kind} {name:?} is forbidden: node {:?} already keeps \
                     {MAX_OBJECTS_PER_NODE} of them, as many as a kubelet runs pods by default",
                    object.node
                )))
            }
            (ObjectWrite::Create, None) => {
                object.generation = 1;
                ("created", Change::default())
            }
            (ObjectWrite::Replace { .. } | ObjectWrite::Delete { .. }, None) => {
                return Err(PushError::NotFound { kind, name })
            }
            (ObjectWrite::Replace { expected } | ObjectWrite::Delete { expected }, Some(c))
                if stale(expected, &c) =>
            {
                return Err(PushError::Conflict { kind, name })
            }
            (ObjectWrite::Replace { .. }, Some(c)) => {
                object.generation = c.generation + 1;
                ("updated", Change::default())
            }
            (ObjectWrite::Delete { .. }, Some(c)) => {
                object = c;
                let change = Change {
                    deleted_objects: vec![key.clone()],
                    ..Change::default()
                };
                ("deleted", change)
            }
        };
        if action != "deleted" {
            change.objects = vec![object.clone()];
        }
        let mut batch = Batch::new(Micros::now());
        batch.node_event(
            &object.node,
            EventKind::ObjectChanged {
                resource: object.resource.clone(),
                name: object.name.clone(),
                action: action.to_string(),
                summary,
            },
        );
        change.batch = batch;
        self.commit_change(change).await?;
        // Written and published: as stored, with its version (the seq of
        // its history entry). A deleted one is answered as it was.
        match action {
            "deleted" => Ok(object),
            _ => Ok(self.view.node_object(&key).unwrap_or(object)),
        }
    }
}

/// Who hears how a pushed status was taken.
enum StatusReply {
    /// A status update (see [`StatusAnswer`]).
    Push(Reply<StatusAnswer>),
    /// A registration's first status: a node of its own.
    Register(Reply<Node>),
}

impl StatusReply {
    /// Answers now: a refusal, or the node as it is (shared for a push,
    /// its own for a registration).
    fn send(self, answer: Result<Arc<Node>, PushError>) {
        // Heard or not: a client that has gone waits for nothing.
        match self {
            StatusReply::Push(reply) => {
                let _ = reply.send(answer.map(StatusAnswer::Now));
            }
            StatusReply::Register(reply) => {
                let _ = reply.send(answer.map(Arc::unwrap_or_clone));
            }
        }
    }

    /// What the store writer answers once the write is durable.
    fn when_durable(self) -> Done {
        match self {
            StatusReply::Push(reply) => {
                let (written, answer) = oneshot::channel();
                let _ = reply.send(Ok(StatusAnswer::Durable(answer)));
                Done::Node(written)
            }
            StatusReply::Register(reply) => Done::Node(reply),
        }
    }
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
        owner_references,
    } = a;
    *name == b.name
        && *uid == b.uid
        && *created == b.created
        && *holder_identity == b.holder_identity
        && *lease_duration_seconds == b.lease_duration_seconds
        && *acquire_time == b.acquire_time
        && *lease_transitions == b.lease_transitions
        && *owner_references == b.owner_references
}
