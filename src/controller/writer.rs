//! The store writer: one thread owns every write the controller makes.
//!
//! Jobs are taken in the order they were sent. Every job that queued while
//! a flush ran goes into the next group; the group is written, made durable
//! with one flush, and only then published to the [`View`] and each job
//! answered (group commit). The controller never waits on the disk unless
//! it asks to.
//!
//! A disk short of space refuses writes before sled sees them: after an
//! I/O error sled takes no write until it is reopened, so running out of
//! space must never reach it. Refused writes are answered as such, reads go
//! on, and writes are taken again by themselves once there is room. After
//! the first refusal every job is refused until the controller, having put
//! back the durable state of what it had sent ahead, sends [`Job::Resume`]:
//! a job computed from a change that was refused must not be written.
//!
//! The writer's loop, its group commit and its full-disk refusal share one
//! state (what is pending, what was refused, what to resume), so the refusal
//! rule above is checked in one place; the gauge moves of a group
//! (`NodeCounts`) follow what it publishes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::push::PushError;
use crate::metrics::Metrics;
use crate::model::{
    ConditionStatus, EventKind, Lease, Micros, Node, NodeObject, ObjectKey, StoreHealth,
};
use crate::store::heartbeats::HeartbeatCheckpoint;
use crate::store::{Batch, Store, Written};
use crate::view::View;

/// Free space the store keeps on its disk: below it, writes are refused
/// (a group of changes, a log segment of sled's and a checkpoint all fit).
pub const STORE_RESERVE_BYTES: u64 = 16 << 20;
/// How often an idle writer looks at the free space, so that readiness
/// follows the disk even when nothing is written.
const IDLE_CHECK: Duration = Duration::from_secs(2);
/// Jobs in one group at most, so a huge queue does not hold back answers.
const MAX_GROUP: usize = 4096;

/// How the writer learns the free space on the store's disk: statvfs, or
/// a fake disk in tests.
#[derive(Clone)]
pub struct FreeSpace(Arc<SpaceOf>);

type SpaceOf = dyn Fn(&Path) -> std::io::Result<u64> + Send + Sync;

impl FreeSpace {
    /// The space the file system says is available to this process.
    pub fn of_disk() -> FreeSpace {
        FreeSpace(Arc::new(|path| fs2::available_space(path)))
    }

    /// A disk whose free space `space` says.
    pub fn fake(space: impl Fn() -> u64 + Send + Sync + 'static) -> FreeSpace {
        FreeSpace(Arc::new(move |_| Ok(space())))
    }

    fn of(&self, path: &Path) -> std::io::Result<u64> {
        (self.0)(path)
    }
}

impl Default for FreeSpace {
    fn default() -> Self {
        FreeSpace::of_disk()
    }
}

impl std::fmt::Debug for FreeSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FreeSpace")
    }
}

/// Why a change was not made durable. Nothing of it was acknowledged.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CommitError {
    #[error("the store takes no writes for now: {0}")]
    Refused(String),
    #[error("the store failed: {0}")]
    Failed(String),
    #[error("the store writer has stopped")]
    Stopped,
}

impl From<CommitError> for PushError {
    fn from(e: CommitError) -> Self {
        PushError::Unavailable(e.to_string())
    }
}

/// A record of the start or clean stop of a controller, kept in the store's meta.
#[derive(Debug, Clone)]
pub(super) enum Mark {
    Started(String),
    CleanStop(Micros),
}

/// What one job writes.
#[derive(Debug, Default)]
pub(super) struct Change {
    pub batch: Batch,
    /// Lease records to store, and Leases to remove (renewals are not history).
    pub leases: Vec<Lease>,
    pub deleted_leases: Vec<String>,
    /// Objects kept with nodes, to store and to remove (the batch has their events).
    pub objects: Vec<NodeObject>,
    pub deleted_objects: Vec<ObjectKey>,
    pub mark: Option<Mark>,
}

impl Change {
    pub fn of(batch: Batch) -> Change {
        Change {
            batch,
            ..Change::default()
        }
    }

    /// Whether it writes a batch and nothing beside it: such changes in a
    /// row share one transaction.
    fn batch_only(&self) -> bool {
        self.leases.is_empty()
            && self.deleted_leases.is_empty()
            && self.objects.is_empty()
            && self.deleted_objects.is_empty()
            && self.mark.is_none()
    }
}

/// Who hears about a job once it is durable (or refused).
pub(super) enum Done {
    /// The controller waits for the written batch.
    Wait(oneshot::Sender<Result<Written, CommitError>>),
    /// A pushed status: answered with the node as written.
    Node(oneshot::Sender<Result<Node, PushError>>),
    /// A Lease write: answered with the Lease.
    Lease(Lease, oneshot::Sender<Result<Lease, PushError>>),
    /// A recorded event.
    Unit(oneshot::Sender<Result<(), PushError>>),
}

/// Who hears how a commit ended: its waiter, and the controller.
pub(super) struct Waiter {
    pub done: Done,
    /// Nodes the controller already shows as changed (sent ahead, not awaited).
    pub ahead: Vec<String>,
    /// The controller's count of resumes when it sent the job.
    pub epoch: u64,
}

/// What the writer is asked to do.
pub(super) enum Job {
    Commit(Box<Change>, Waiter),
    /// Heartbeat times, written beside the store after the group's flush.
    Checkpoint(HeartbeatCheckpoint),
    /// The controller has put back the durable state of everything it had
    /// sent ahead: jobs from here on may be written again.
    Resume,
    /// Finish the jobs before this one, then stop.
    Stop(oneshot::Sender<()>),
    /// Holds the writer, as a long flush would, until the sender drops.
    #[cfg(test)]
    Hold(std_mpsc::Receiver<()>),
}

/// What the controller hears of each commit, in order.
#[derive(Debug)]
pub(super) struct Settled {
    pub epoch: u64,
    pub ahead: Vec<String>,
    /// Each written node's new resource version.
    pub versions: Vec<(String, u64)>,
    /// Why it was not written, if it was not.
    pub refused: Option<String>,
}

/// The controller's handle on the writer thread.
pub(super) struct StoreWriter {
    jobs: std_mpsc::Sender<Job>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl StoreWriter {
    /// Starts the writer thread; `settled` hears of every commit.
    pub fn start(
        store: Arc<Store>,
        view: Arc<View>,
        metrics: Arc<Metrics>,
        settled: mpsc::UnboundedSender<Settled>,
        free_space: FreeSpace,
    ) -> std::io::Result<StoreWriter> {
        let (jobs, queue) = std_mpsc::channel();
        let dir = store.path().to_path_buf();
        let writer = Writer {
            store,
            view,
            metrics,
            settled,
            dir,
            free_space,
            refusing: None,
            failed: None,
        };
        let thread = std::thread::Builder::new()
            .name("nodekeeper-store".into())
            .spawn(move || writer.run(queue))?;
        Ok(StoreWriter {
            jobs,
            thread: Mutex::new(Some(thread)),
        })
    }

    pub fn send(&self, job: Job) -> Result<(), CommitError> {
        self.jobs.send(job).map_err(|_| CommitError::Stopped)
    }

    /// Writes `change` and waits until it is durable and published.
    pub async fn commit(&self, change: Change, epoch: u64) -> Result<Written, CommitError> {
        let (done, answer) = oneshot::channel();
        let waiter = Waiter {
            done: Done::Wait(done),
            ahead: Vec::new(),
            epoch,
        };
        self.send(Job::Commit(Box::new(change), waiter))?;
        answer.await.map_err(|_| CommitError::Stopped)?
    }

    /// Finishes every job sent so far, then ends the thread.
    pub async fn stop(&self) {
        let (done, stopped) = oneshot::channel();
        if self.send(Job::Stop(done)).is_ok() {
            let _ = stopped.await;
        }
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(thread) = thread {
            // It has answered Stop, so it is returning.
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

/// One job of a group that was written (its change without the batch),
/// waiting for the flush.
struct Pending {
    written: Written,
    change: Box<Change>,
    waiter: Waiter,
}

/// The thread's state.
struct Writer {
    store: Arc<Store>,
    view: Arc<View>,
    metrics: Arc<Metrics>,
    settled: mpsc::UnboundedSender<Settled>,
    dir: PathBuf,
    free_space: FreeSpace,
    /// Set at a refusal: every job is refused until [`Job::Resume`].
    refusing: Option<String>,
    /// Set when sled failed: nothing is written again in this process.
    failed: Option<String>,
}

impl Writer {
    fn run(mut self, queue: std_mpsc::Receiver<Job>) {
        // Ends when the controller stops it or drops its handle.
        loop {
            let first = match queue.recv_timeout(IDLE_CHECK) {
                Ok(job) => job,
                Err(std_mpsc::RecvTimeoutError::Timeout) => {
                    self.check_space();
                    continue;
                }
                Err(std_mpsc::RecvTimeoutError::Disconnected) => return,
            };
            #[cfg(test)]
            let first = match first {
                // Held before the group is gathered: whatever is sent meanwhile forms the next.
                Job::Hold(until) => {
                    let _ = until.recv();
                    continue;
                }
                job => job,
            };
            let mut group = vec![first];
            while group.len() < MAX_GROUP {
                match queue.try_recv() {
                    Ok(job) => group.push(job),
                    Err(_) => break,
                }
            }
            if let Some(stopped) = self.run_group(group) {
                let _ = stopped.send(());
                return;
            }
        }
    }

    /// Why writes cannot be taken now, if they cannot: the store failed, or
    /// its disk is short of space. Keeps the health up to date.
    fn check_space(&self) -> Option<String> {
        let reason = match &self.failed {
            Some(reason) => Some(reason.clone()),
            None => match self.free_space.of(&self.dir) {
                Ok(free) if free < STORE_RESERVE_BYTES => Some(format!(
                    "the disk holding the store {} has {} free, less than the {} nodekeeper keeps \
                     free so that a write can always finish; free some space and writes are \
                     taken again by themselves",
                    self.dir.display(),
                    bytes(free),
                    bytes(STORE_RESERVE_BYTES)
                )),
                Ok(_) => None,
                // Not knowing is no reason to refuse: the flush will tell.
                Err(e) => {
                    tracing::debug!("cannot read the free space of {}: {e}", self.dir.display());
                    None
                }
            },
        };
        let health = match (&self.failed, &reason) {
            (Some(_), Some(r)) => StoreHealth::Failed(r.clone()),
            (None, Some(r)) => StoreHealth::Refusing(r.clone()),
            (_, None) => StoreHealth::Writable,
        };
        self.view.store_health_sender().send_if_modified(|h| {
            let changed = *h != health;
            if changed {
                match &health {
                    StoreHealth::Writable => tracing::info!("the store takes writes again"),
                    StoreHealth::Refusing(r) | StoreHealth::Failed(r) => {
                        tracing::error!("the store refuses writes: {r}")
                    }
                }
                *h = health;
            }
            changed
        });
        self.metrics.store_writable.set(i64::from(reason.is_none()));
        reason
    }

    /// Writes, flushes, publishes and answers one group. Returns the stop
    /// request if the group held one.
    /// Over 80 lines: one group's jobs are prepared, written in one
    /// transaction, flushed, published and answered in order, and each step
    /// needs what the one before kept.
    fn run_group(&mut self, group: Vec<Job>) -> Option<oneshot::Sender<()>> {
        // The writer is an OS thread timing its own work, outside any runtime.
        #[allow(clippy::disallowed_methods, clippy::disallowed_types)]
        let started = std::time::Instant::now();
        let jobs = group.len();
        let mut pending: Vec<Pending> = Vec::new();
        // Jobs that write a batch and nothing else, in a row: one transaction.
        let mut run: Vec<(Box<Change>, Waiter)> = Vec::new();
        let mut checkpoint = None;
        let mut stop = None;
        let mut space_checked = false;
        for job in group {
            let (mut change, waiter) = match job {
                Job::Commit(change, waiter) => (change, waiter),
                // Written after the group's flush.
                Job::Checkpoint(c) => {
                    checkpoint = Some(c);
                    continue;
                }
                Job::Resume => {
                    // The jobs before it were judged before it.
                    self.write_run(&mut run, &mut pending);
                    self.refusing = None;
                    space_checked = false;
                    continue;
                }
                Job::Stop(reply) => {
                    stop = Some(reply);
                    continue;
                }
                #[cfg(test)]
                Job::Hold(until) => {
                    self.write_run(&mut run, &mut pending);
                    let _ = until.recv();
                    continue;
                }
            };
            if self.refusing.is_none() && !space_checked {
                space_checked = true;
                self.refusing = self.check_space();
            }
            if let Some(reason) = &self.refusing {
                let reason = reason.clone();
                self.answer(waiter, Err(reason));
                continue;
            }
            if change.batch_only() {
                run.push((change, waiter));
                continue;
            }
            self.write_run(&mut run, &mut pending);
            if let Some(reason) = &self.refusing {
                let reason = reason.clone();
                self.answer(waiter, Err(reason));
                continue;
            }
            match self.write(&mut change) {
                Ok(written) => pending.push(Pending {
                    written,
                    change,
                    waiter,
                }),
                Err(e) => self.refuse_after(e, [waiter]),
            }
        }
        self.write_run(&mut run, &mut pending);
        let writing = started.elapsed();
        let (mut flushing, mut answering) = (Duration::ZERO, Duration::ZERO);
        if !pending.is_empty() {
            (flushing, answering) = self.flush_and_answer(pending);
        }
        // Where a burst's time goes, stage by stage (`--log nodekeeper::controller::writer=debug`).
        tracing::debug!(
            jobs,
            write_ms = writing.as_secs_f64() * 1e3,
            flush_ms = flushing.as_secs_f64() * 1e3,
            publish_and_answer_ms = answering.as_secs_f64() * 1e3,
            "store group written"
        );
        if let Some(checkpoint) = checkpoint {
            self.write_checkpoint(&checkpoint);
        }
        stop
    }

    /// Writes a run of batch-only jobs in one transaction (see
    /// [`Store::write_all`]); they wait for the group's flush.
    fn write_run(&mut self, run: &mut Vec<(Box<Change>, Waiter)>, pending: &mut Vec<Pending>) {
        if run.is_empty() {
            return;
        }
        let mut jobs = std::mem::take(run);
        let batches = jobs
            .iter_mut()
            .map(|(change, _)| std::mem::take(&mut change.batch))
            .collect();
        match self.store.write_all(batches) {
            Ok(written) => {
                for ((change, waiter), written) in jobs.into_iter().zip(written) {
                    pending.push(Pending {
                        written,
                        change,
                        waiter,
                    });
                }
            }
            // All or none: none of them was written.
            Err(e) => self.refuse_after(e, jobs.into_iter().map(|(_, waiter)| waiter)),
        }
    }

    /// A write failed: these jobs and every one after are refused.
    fn refuse_after(
        &mut self,
        e: crate::store::StoreError,
        jobs: impl IntoIterator<Item = Waiter>,
    ) {
        let reason = format!("writing to the store failed: {e}");
        tracing::error!("{reason}");
        self.refusing = Some(reason.clone());
        for waiter in jobs {
            self.answer(waiter, Err(reason.clone()));
        }
    }

    /// Writes one change into sled (not yet durable).
    fn write(&self, change: &mut Change) -> Result<Written, crate::store::StoreError> {
        let written = self.store.write(std::mem::take(&mut change.batch))?;
        if !change.leases.is_empty() {
            self.store.put_leases(&change.leases)?;
        }
        for name in &change.deleted_leases {
            self.store.delete_lease(name)?;
        }
        if !change.objects.is_empty() || !change.deleted_objects.is_empty() {
            // An object's version is the seq of the history entry that wrote
            // it, as a node's is: a watch resumes from it.
            for object in &mut change.objects {
                if let Some(seq) = written
                    .events
                    .iter()
                    .rev()
                    .find(|e| wrote(e, object))
                    .map(|e| e.seq)
                {
                    object.generation = seq;
                }
            }
            self.store
                .write_node_objects(&change.objects, &change.deleted_objects)?;
        }
        match &change.mark {
            None => {}
            Some(Mark::Started(instance)) => self.store.mark_started(instance)?,
            Some(Mark::CleanStop(at)) => self.store.mark_clean_stop(*at)?,
        }
        Ok(written)
    }

    /// Returns how long the flush took, and the publishing and answers after it.
    fn flush_and_answer(&mut self, pending: Vec<Pending>) -> (Duration, Duration) {
        // The writer is an OS thread timing a real disk flush, outside any runtime.
        #[allow(clippy::disallowed_methods, clippy::disallowed_types)]
        let started = std::time::Instant::now();
        let flushed = self.store.flush_blocking();
        let flushing = started.elapsed();
        self.metrics.store_flushes.inc();
        self.metrics
            .store_flush_duration
            .observe(flushing.as_secs_f64());
        self.metrics.store_group_size.observe(pending.len() as f64);
        let durable = match flushed {
            Ok(durable) => durable,
            Err(e) => {
                // Written but not durable: sled takes nothing more until it
                // is reopened, and nothing of this group was acknowledged.
                let reason = format!(
                    "the store could not be flushed ({e}); nothing after the last flush was \
                     acknowledged. It takes no writes until nodekeeper is restarted; check the \
                     disk first"
                );
                tracing::error!("{reason}");
                self.failed = Some(reason.clone());
                self.refusing = Some(reason.clone());
                self.check_space();
                for p in pending {
                    self.answer(p.waiter, Err(reason.clone()));
                }
                return (flushing, started.elapsed() - flushing);
            }
        };
        let counts = NodeCounts::of_group(&pending, |name| self.view.shared(name));
        // Deletions too, before readers following the durable seq
        // (watches, the mirror) look: the view agrees with the log. One
        // publish for the group unless it deletes (then in order).
        if pending.iter().all(|p| p.written.deleted.is_empty()) {
            self.view.publish(
                pending.iter().flat_map(|p| p.written.nodes.iter().cloned()),
                &[],
            );
        } else {
            for p in &pending {
                self.view
                    .publish(p.written.nodes.iter().cloned(), &p.written.deleted);
            }
        }
        for p in &pending {
            let c = &p.change;
            if !c.leases.is_empty() || !c.deleted_leases.is_empty() {
                self.view
                    .publish_leases(c.leases.iter().cloned(), &c.deleted_leases);
            }
            if !c.objects.is_empty()
                || !c.deleted_objects.is_empty()
                || !p.written.deleted.is_empty()
            {
                self.view.publish_objects(
                    c.objects.iter().cloned(),
                    &c.deleted_objects,
                    &p.written.deleted,
                );
            }
            for event in &p.written.events {
                crate::logging::transition(event.seq, event.node.as_deref(), &event.kind);
                if let EventKind::ConditionChanged { condition, to, .. } = &event.kind {
                    let labels = crate::metrics::ConditionLabels {
                        condition: condition.clone(),
                        status: *to,
                    };
                    self.metrics.transitions.get_or_create(&labels).inc();
                }
            }
        }
        self.view.advance(durable);
        counts.apply(&self.metrics);
        self.metrics.store_events.set(durable as i64);
        for p in pending {
            self.answer(p.waiter, Ok(p.written));
        }
        if self.failed.is_none() && self.refusing.is_none() {
            self.check_space();
        }
        (flushing, started.elapsed() - flushing)
    }

    /// Tells the controller, then the job's waiter, how it ended.
    fn answer(&self, waiter: Waiter, outcome: Result<Written, String>) {
        let Waiter { done, ahead, epoch } = waiter;
        let versions = match &outcome {
            Ok(written) => written
                .nodes
                .iter()
                .map(|n| (n.name.clone(), n.resource_version))
                .collect(),
            Err(_) => Vec::new(),
        };
        let _ = self.settled.send(Settled {
            epoch,
            ahead,
            versions,
            refused: outcome.as_ref().err().cloned(),
        });
        let outcome = outcome.map_err(|reason| match self.failed {
            Some(_) => CommitError::Failed(reason),
            None => CommitError::Refused(reason),
        });
        // A waiter that gave up (its client went away) needs no answer.
        match done {
            Done::Wait(reply) => {
                let _ = reply.send(outcome);
            }
            Done::Node(reply) => {
                let _ =
                    reply.send(outcome.map_err(PushError::from).and_then(|written| {
                        written.nodes.into_iter().last().ok_or_else(|| {
                            PushError::Unavailable("the change wrote no node".into())
                        })
                    }));
            }
            Done::Lease(lease, reply) => {
                let _ = reply.send(outcome.map(|_| lease).map_err(PushError::from));
            }
            Done::Unit(reply) => {
                let _ = reply.send(outcome.map(|_| ()).map_err(PushError::from));
            }
        }
    }

    fn write_checkpoint(&self, checkpoint: &HeartbeatCheckpoint) {
        if self.check_space().is_some() {
            // Times only; the next checkpoint carries newer ones.
            return;
        }
        if let Err(e) = checkpoint.write(&self.dir) {
            tracing::warn!("{e}; heartbeat times after a restart may be older");
        }
    }
}

/// How a group's writes move the node gauges (nodes by condition and
/// status): the records they replace or delete count down, the new ones
/// up. Counting the group's nodes instead of every node keeps a flush of a
/// few changes at 10,000 nodes from a scan of 40,000 conditions before its
/// answers.
#[derive(Debug, Default)]
struct NodeCounts {
    /// By condition type and status; a handful of types, so a list.
    moves: Vec<(String, ConditionStatus, i64)>,
}

impl NodeCounts {
    /// What publishing `pending` in order does to the gauges; `shown` reads
    /// the view's record of a node before the group.
    fn of_group(pending: &[Pending], shown: impl Fn(&str) -> Option<Arc<Node>>) -> NodeCounts {
        let mut counts = NodeCounts::default();
        // The group's newest record of each node it wrote (`None`: deleted).
        let mut newest: HashMap<&str, Option<&Node>> = HashMap::new();
        for p in pending {
            // As the view applies a publish: the records, then the deletions.
            let records = p.written.nodes.iter().map(|n| (n.name.as_str(), Some(n)));
            let deletions = p.written.deleted.iter().map(|name| (name.as_str(), None));
            for (name, record) in records.chain(deletions) {
                match newest.insert(name, record) {
                    Some(Some(before)) => counts.count(before, -1),
                    Some(None) => {}
                    None => {
                        if let Some(before) = shown(name) {
                            counts.count(&before, -1);
                        }
                    }
                }
                if let Some(node) = record {
                    counts.count(node, 1);
                }
            }
        }
        counts
    }

    fn count(&mut self, node: &Node, by: i64) {
        for c in &node.conditions {
            match self
                .moves
                .iter_mut()
                .find(|(kind, status, _)| *status == c.status && *kind == c.kind)
            {
                Some((_, _, n)) => *n += by,
                None => self.moves.push((c.kind.clone(), c.status, by)),
            }
        }
    }

    /// Moves the gauges; the controller set them from every node at start.
    fn apply(self, metrics: &Metrics) {
        for (condition, status, n) in self.moves {
            if n != 0 {
                let labels = crate::metrics::ConditionLabels { condition, status };
                metrics.nodes.get_or_create(&labels).inc_by(n);
            }
        }
    }
}

/// Bytes for people: `12.0 MiB`.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Whether `event` is the history entry of a write of `object`.
fn wrote(event: &crate::model::Event, object: &NodeObject) -> bool {
    matches!(&event.kind, EventKind::ObjectChanged { resource, name, .. }
        if *resource == object.resource && *name == object.name)
        && event.node.as_deref() == Some(object.node.as_str())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;
    use crate::controller::register::new_node;
    use crate::model::ConditionStatus;
    use crate::source::static_list::static_spec;
    use crate::store::StoreOptions;

    /// A writer on a store in a temporary directory, with a disk whose free
    /// space the test sets.
    struct Harness {
        _dir: tempfile::TempDir,
        store: Arc<Store>,
        view: Arc<View>,
        metrics: Arc<Metrics>,
        writer: StoreWriter,
        settled: mpsc::UnboundedReceiver<Settled>,
        free: Arc<AtomicU64>,
    }

    impl Harness {
        fn start() -> Harness {
            let dir = tempfile::tempdir().unwrap();
            let store =
                Arc::new(Store::open(&dir.path().join("db"), &StoreOptions::default()).unwrap());
            let view = Arc::new(View::default());
            let metrics = Arc::new(Metrics::new());
            let (settled_tx, settled) = mpsc::unbounded_channel();
            let free = Arc::new(AtomicU64::new(u64::MAX));
            let space = free.clone();
            let writer = StoreWriter::start(
                store.clone(),
                view.clone(),
                metrics.clone(),
                settled_tx,
                FreeSpace::fake(move || space.load(Ordering::SeqCst)),
            )
            .unwrap();
            Harness {
                _dir: dir,
                store,
                view,
                metrics,
                writer,
                settled,
                free,
            }
        }

        /// Holds the writer until the returned sender is dropped.
        fn hold(&self) -> std_mpsc::Sender<()> {
            let (release, until) = std_mpsc::channel();
            self.writer.send(Job::Hold(until)).unwrap();
            release
        }

        /// A status change of node `name` to `status`, sent ahead; its answer comes through the receiver.
        fn change(
            &self,
            name: &str,
            status: ConditionStatus,
            epoch: u64,
        ) -> oneshot::Receiver<Result<Node, PushError>> {
            let now = Micros::now();
            let mut node = new_node(
                &static_spec(name.into(), None, Default::default(), Default::default()),
                now,
            );
            node.conditions[0].status = status;
            let mut batch = Batch::new(now);
            batch.record(
                node,
                [EventKind::ConditionChanged {
                    condition: "Ready".into(),
                    from: None,
                    to: status,
                    reason: "KubeletReady".into(),
                    message: String::new(),
                }],
            );
            let (reply, answer) = oneshot::channel();
            self.writer
                .send(Job::Commit(
                    Box::new(Change::of(batch)),
                    Waiter {
                        done: Done::Node(reply),
                        ahead: vec![name.to_string()],
                        epoch,
                    },
                ))
                .unwrap();
            answer
        }

        fn flushes(&self) -> u64 {
            self.metrics.store_flushes.get()
        }
    }

    fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn changes_that_queue_during_a_flush_share_the_next_one() {
        let mut h = Harness::start();
        // The writer is busy (as in a long flush) while 500 changes arrive.
        let release = h.hold();
        let answers: Vec<_> = (0..500)
            .map(|i| h.change(&format!("node-{i:03}"), ConditionStatus::True, 0))
            .collect();
        assert_eq!(h.flushes(), 0);
        drop(release);
        let nodes: Vec<Node> = block_on(async {
            let mut nodes = Vec::new();
            for answer in answers {
                let node = answer.await.unwrap().unwrap();
                // Answered only once durable, and readers see it.
                assert!(h.store.durable_seq() >= node.resource_version);
                assert!(h.view.published() >= node.resource_version);
                assert!(h.view.get(&node.name).is_some());
                nodes.push(node);
            }
            nodes
        });
        assert_eq!(h.flushes(), 1, "500 changes, one flush");
        let versions: std::collections::BTreeSet<u64> =
            nodes.iter().map(|n| n.resource_version).collect();
        assert_eq!(versions.len(), 500, "each change has its own event");
        assert_eq!(h.store.nodes().unwrap().len(), 500);
        for _ in 0..500 {
            let settled = h.settled.try_recv().unwrap();
            assert_eq!((settled.refused, settled.versions.len()), (None, 1));
        }
    }

    /// The node gauges as a count of every published node would set them.
    fn gauges_of(metrics: &Metrics) -> Vec<i64> {
        ConditionStatus::ALL
            .into_iter()
            .map(|status| {
                let labels = crate::metrics::ConditionLabels {
                    condition: "Ready".into(),
                    status,
                };
                metrics.nodes.get_or_create(&labels).get()
            })
            .collect()
    }

    #[test]
    fn node_gauges_follow_each_group_as_a_count_of_every_node_would() {
        let h = Harness::start();
        let counted = |view: &View| {
            let all = Metrics::new();
            view.with_nodes(|nodes| {
                all.set_node_counts(
                    nodes.flat_map(|n| n.conditions.iter().map(|c| (c.kind.as_str(), c.status))),
                )
            });
            gauges_of(&all)
        };
        let first: Vec<_> = [
            ("node-a", ConditionStatus::True),
            ("node-b", ConditionStatus::True),
            ("node-c", ConditionStatus::False),
        ]
        .into_iter()
        .map(|(name, status)| h.change(name, status, 0))
        .collect();
        block_on(async {
            for answer in first {
                answer.await.unwrap().unwrap();
            }
        });
        assert_eq!(gauges_of(&h.metrics), vec![2, 1, 0]);
        assert_eq!(gauges_of(&h.metrics), counted(&h.view));
        // One group: a node changed twice, one deleted, one new.
        let flushed = h.flushes();
        let release = h.hold();
        let twice = [
            h.change("node-a", ConditionStatus::False, 0),
            h.change("node-a", ConditionStatus::Unknown, 0),
        ];
        let mut batch = Batch::new(Micros::now());
        batch.delete("node-b", "removed from the nodes file");
        let (deleted, answer) = oneshot::channel();
        h.writer
            .send(Job::Commit(
                Box::new(Change::of(batch)),
                Waiter {
                    done: Done::Wait(deleted),
                    ahead: Vec::new(),
                    epoch: 0,
                },
            ))
            .unwrap();
        let new = h.change("node-d", ConditionStatus::True, 0);
        drop(release);
        block_on(async {
            for answer in twice {
                answer.await.unwrap().unwrap();
            }
            answer.await.unwrap().unwrap();
            new.await.unwrap().unwrap();
        });
        assert_eq!(h.flushes(), flushed + 1, "one group");
        assert_eq!(gauges_of(&h.metrics), vec![1, 1, 1]);
        assert_eq!(gauges_of(&h.metrics), counted(&h.view));
        // One group without deletions (one publish): a node changed twice.
        let release = h.hold();
        let twice = [
            h.change("node-c", ConditionStatus::True, 0),
            h.change("node-c", ConditionStatus::Unknown, 0),
        ];
        drop(release);
        block_on(async {
            for answer in twice {
                answer.await.unwrap().unwrap();
            }
        });
        assert_eq!(h.flushes(), flushed + 2, "one group");
        assert_eq!(gauges_of(&h.metrics), vec![1, 0, 2]);
        assert_eq!(gauges_of(&h.metrics), counted(&h.view));
        assert_eq!(
            h.view.get("node-c").unwrap().0.conditions[0].status,
            ConditionStatus::Unknown
        );
    }

    #[test]
    fn a_refusal_refuses_every_later_job_until_the_controller_resumes() {
        let mut h = Harness::start();
        let first = h.change("node-a", ConditionStatus::True, 0);
        block_on(first).unwrap().unwrap();
        // The disk fills up: nothing is written, and the health says why.
        h.free.store(1 << 20, Ordering::SeqCst);
        let release = h.hold();
        let refused = h.change("node-a", ConditionStatus::False, 0);
        // Built on the refused change, so it must not be written even once
        // there is room again.
        let built_on_it = h.change("node-a", ConditionStatus::Unknown, 0);
        drop(release);
        let e = block_on(refused).unwrap().unwrap_err();
        assert!(
            matches!(&e, PushError::Unavailable(m) if m.contains("1.0 MiB free")),
            "{e}"
        );
        assert!(h
            .view
            .store_writable()
            .unwrap_err()
            .contains("less than the 16.0 MiB"));
        assert_eq!(h.metrics.store_writable.get(), 0);
        h.free.store(u64::MAX, Ordering::SeqCst);
        assert!(block_on(built_on_it).unwrap().is_err());
        let durable = h.store.durable_seq();
        assert_eq!(
            h.store.node("node-a").unwrap().unwrap().conditions[0].status,
            ConditionStatus::True
        );
        for _ in 0..3 {
            h.settled.try_recv().unwrap();
        }
        // The controller has put the durable state back: writes are taken again.
        h.writer.send(Job::Resume).unwrap();
        let after = h.change("node-a", ConditionStatus::False, 1);
        let node = block_on(after).unwrap().unwrap();
        assert!(node.resource_version > durable);
        assert_eq!(h.view.store_writable(), Ok(()));
        assert_eq!(h.metrics.store_writable.get(), 1);
        let last = h.settled.try_recv().unwrap();
        assert_eq!((last.refused, last.epoch), (None, 1));
    }

    #[test]
    fn an_idle_writer_follows_the_free_space() {
        let h = Harness::start();
        h.free.store(0, Ordering::SeqCst);
        let mut health = h.view.store_health();
        block_on(async {
            tokio::time::timeout(
                Duration::from_secs(30),
                health.wait_for(|s| *s != StoreHealth::Writable),
            )
            .await
            .unwrap()
            .unwrap();
        });
        h.free.store(u64::MAX, Ordering::SeqCst);
        block_on(async {
            tokio::time::timeout(
                Duration::from_secs(30),
                health.wait_for(|s| *s == StoreHealth::Writable),
            )
            .await
            .unwrap()
            .unwrap();
        });
        assert_eq!(h.flushes(), 0);
    }

    #[test]
    fn checkpoints_are_skipped_on_a_full_disk_and_written_after() {
        let h = Harness::start();
        let dir = h.store.path().to_path_buf();
        let checkpoint = HeartbeatCheckpoint {
            taken: 1,
            nodes: Vec::new(),
        };
        h.free.store(0, Ordering::SeqCst);
        h.writer.send(Job::Checkpoint(checkpoint.clone())).unwrap();
        block_on(h.writer.commit(Change::default(), 0)).unwrap_err();
        assert_eq!(HeartbeatCheckpoint::read(&dir).unwrap(), None);
        h.free.store(u64::MAX, Ordering::SeqCst);
        h.writer.send(Job::Resume).unwrap();
        h.writer.send(Job::Checkpoint(checkpoint.clone())).unwrap();
        block_on(h.writer.stop());
        assert_eq!(HeartbeatCheckpoint::read(&dir).unwrap(), Some(checkpoint));
    }
}
