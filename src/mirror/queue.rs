//! The mirror's schedule: which piece of work starts next, and what a
//! finished one means for the rest. Pure state with one method per event
//! (leadership gained, events followed, the API server's nodes seen, work
//! finished), no I/O, so its rules are tested on paused time.
//!
//! Inside the budget, work goes by [`Priority`]: Lease renewals of Ready
//! nodes first, then condition and taint changes, then creations and the
//! backlog after an outage or a restart (lists are the watcher's, last).
//! A quarter of the workers are kept for Lease renewals.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;

use super::budget::Priority;
use super::{BUSY_RETRY, FOLLOW_BATCH};
use crate::backoff::Backoff;
use crate::model::{ConditionStatus, EventKind};
use crate::store::{HistoryQuery, OutboxKey, Store};
use crate::view::View;

/// Failures are logged one by one at debug level, and summed up at warning
/// level at most this often: an outage with 10k nodes must not flood the log.
const FAILURE_LOG_PERIOD: Duration = Duration::from_secs(10);

/// A piece of work.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Job {
    Outbox(OutboxKey),
    Lease(String),
}

impl Job {
    fn node(&self) -> &str {
        match self {
            Job::Outbox(key) => key.node(),
            Job::Lease(name) => name,
        }
    }
}

/// How a piece of work ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    /// Done; `created` when the Node was created upstream (its Lease is
    /// due); `again` when a newer change was queued meanwhile (the same
    /// work again, now).
    Done { created: bool, again: bool },
    /// Not now (the node busy, a newer change queued, an eviction held):
    /// again after this long, no failure.
    Later(Duration),
    /// Failed; retried with backoff. `unreachable` when the API server did
    /// not answer or answered 5xx.
    Failed { message: String, unreachable: bool },
    /// The API server throttled it (429): again after its Retry-After.
    Throttled(Duration),
}

/// What the loop should say about a finished piece of work.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Finished {
    /// A summary of failures to log as a warning.
    pub warn: Option<String>,
    /// The API server answers again after failing: the backlog drains now.
    pub recovered: bool,
}

/// The mirror's schedule.
pub(crate) struct Queue {
    /// Lease phases count from here.
    epoch: Instant,
    /// How often a Ready node's Lease is renewed; `None`: Leases are not mirrored.
    renew: Option<Duration>,
    backoff: Backoff,
    /// Every outbox key known to be queued, with its priority.
    queued: HashMap<OutboxKey, Priority>,
    /// Keys ready to start, by priority then arrival.
    ready: BTreeSet<(Priority, u64, OutboxKey)>,
    ready_index: HashMap<OutboxKey, (Priority, u64)>,
    arrivals: u64,
    /// Keys waiting out a backoff or a hold.
    delayed: BTreeSet<(Instant, OutboxKey)>,
    /// Keys whose node has work in flight, resumed when it finishes.
    parked: HashMap<String, Vec<OutboxKey>>,
    busy: HashSet<String>,
    /// Outbox keys whose work is in flight, and whether they were queued
    /// again meanwhile: the entry the work cleared may have been written
    /// anew after it read it, so the work is done once more.
    running: HashMap<OutboxKey, bool>,
    /// Nodes that changed upstream while busy: looked at again when done.
    dirty: HashMap<String, Priority>,
    leases_due: BTreeSet<(Instant, String)>,
    lease_at: HashMap<String, Instant>,
    /// Ready nodes of the registry: whose Leases are renewed.
    ready_nodes: HashSet<String>,
    attempts: HashMap<Job, u32>,
    /// Set while requests fail for want of an API server (no answer, 5xx):
    /// the first success after it retries everything waiting, at once (the
    /// budget still paces it), instead of each at its own backoff.
    outage: bool,
    unlogged: u64,
    last_logged: Option<Instant>,
}

impl Queue {
    pub(crate) fn new(now: Instant, renew: Option<Duration>, backoff: Backoff) -> Queue {
        Queue {
            epoch: now,
            renew,
            backoff,
            queued: HashMap::new(),
            ready: BTreeSet::new(),
            ready_index: HashMap::new(),
            arrivals: 0,
            delayed: BTreeSet::new(),
            parked: HashMap::new(),
            busy: HashSet::new(),
            running: HashMap::new(),
            dirty: HashMap::new(),
            leases_due: BTreeSet::new(),
            lease_at: HashMap::new(),
            ready_nodes: HashSet::new(),
            attempts: HashMap::new(),
            outage: false,
            unlogged: 0,
            last_logged: None,
        }
    }

    pub(crate) fn outbox_len(&self) -> usize {
        self.queued.len()
    }

    /// Ready nodes of the registry.
    pub(crate) fn ready_count(&self) -> usize {
        self.ready_nodes.len()
    }

    #[cfg(test)]
    fn in_outage(&self) -> bool {
        self.outage
    }

    /// A key now in the outbox (again): queued unless it already is; a
    /// queued key moves up when asked for at a higher priority.
    pub(crate) fn add(&mut self, key: OutboxKey, priority: Priority) {
        if let Some(again) = self.running.get_mut(&key) {
            *again = true;
        }
        match self.queued.get(&key).copied() {
            None => {
                self.queued.insert(key.clone(), priority);
                self.make_ready(key);
            }
            Some(was) if priority < was => {
                self.queued.insert(key.clone(), priority);
                if let Some((p, n)) = self.ready_index.remove(&key) {
                    self.ready.remove(&(p, n, key.clone()));
                    self.make_ready(key);
                }
            }
            Some(_) => {}
        }
    }

    fn make_ready(&mut self, key: OutboxKey) {
        let priority = self.queued.get(&key).copied().unwrap_or(Priority::Change);
        self.arrivals += 1;
        self.ready_index
            .insert(key.clone(), (priority, self.arrivals));
        self.ready.insert((priority, self.arrivals, key));
    }

    /// Leadership gained: every Ready node's Lease is due now, and
    /// everything waiting is tried now.
    pub(crate) fn lead(&mut self, now: Instant, view: &View) {
        self.ready_nodes = view
            .list()
            .into_iter()
            .filter(|(n, _)| n.ready() == ConditionStatus::True)
            .map(|(n, _)| n.name)
            .collect();
        self.renew_all_now(now);
        self.retry_all_now(None);
    }

    /// Leadership lost: work in flight was aborted (each reported through
    /// [`Queue::aborted`]); what the API server showed is forgotten.
    pub(crate) fn lost_lead(&mut self) {
        self.dirty.clear();
        self.outage = false;
    }

    /// Every Ready node's Lease is due now.
    pub(crate) fn renew_all_now(&mut self, now: Instant) {
        let names: Vec<String> = self.ready_nodes.iter().cloned().collect();
        for name in names {
            self.schedule_lease(&name, now);
        }
    }

    fn schedule_lease(&mut self, name: &str, at: Instant) {
        if self.renew.is_none() {
            return;
        }
        if let Some(old) = self.lease_at.get(name) {
            if *old <= at {
                return;
            }
            self.leases_due.remove(&(*old, name.to_string()));
        }
        self.lease_at.insert(name.to_string(), at);
        self.leases_due.insert((at, name.to_string()));
    }

    /// When a Lease renewed at `now` is due again: at its node's own phase
    /// of the interval (a hash of its name), so renewals spread evenly over
    /// the interval instead of bunching; at least a quarter interval on, so
    /// a late renewal is not followed at once by another.
    pub(crate) fn next_renewal(&self, name: &str, now: Instant) -> Option<Instant> {
        let renew = self.renew?.as_nanos().max(1);
        let phase = (phase_of(name) * renew as f64) as u128;
        // The first slot (epoch + phase + k·renew) a quarter interval away.
        let target = (now.saturating_duration_since(self.epoch)).as_nanos() + renew / 4;
        let k = target.saturating_sub(phase).div_ceil(renew);
        let offset = u64::try_from(phase + k * renew).unwrap_or(u64::MAX);
        Some(self.epoch + Duration::from_nanos(offset))
    }

    /// Queues the work of the events durable since `seen`; returns the new
    /// `seen`, and whether the number of Ready nodes changed.
    pub(crate) fn follow(
        &mut self,
        store: &Store,
        view: &View,
        mut seen: u64,
        durable: u64,
        now: Instant,
    ) -> (u64, bool) {
        let before = self.ready_nodes.len();
        // Bounded: each round reads up to FOLLOW_BATCH events and advances.
        while seen < durable {
            let query = HistoryQuery {
                after_seq: Some(seen),
                limit: Some(FOLLOW_BATCH),
                ..HistoryQuery::default()
            };
            let events = match store.history(&query) {
                Ok(events) => events,
                Err(e) => {
                    tracing::error!("the mirror could not read the event log: {e}");
                    break;
                }
            };
            let Some(last) = events.last().map(|e| e.seq) else {
                seen = durable;
                break;
            };
            let mut touched = HashSet::new();
            for e in &events {
                let Some(node) = &e.node else { continue };
                // A new node is a creation; anything else a change.
                let priority = match e.kind {
                    EventKind::Registered { .. } => Priority::Backlog,
                    _ => Priority::Change,
                };
                for (key, _) in OutboxKey::for_event(node, &e.kind) {
                    self.add(key, priority);
                }
                if e.kind.changes_node() {
                    touched.insert(node.clone());
                }
            }
            for name in touched {
                let ready = view
                    .get(&name)
                    .is_some_and(|(n, _)| n.ready() == ConditionStatus::True);
                if ready {
                    if self.ready_nodes.insert(name.clone()) {
                        self.schedule_lease(&name, now);
                    }
                } else {
                    self.ready_nodes.remove(&name);
                }
            }
            seen = last;
        }
        (seen, self.ready_nodes.len() != before)
    }

    /// The API server's copy of a node was seen missing (`missing`) or
    /// differing from the registry: its Node is queued, unless work for it
    /// is in flight, which then looks again when it ends.
    pub(crate) fn upstream_changed(&mut self, name: &str, missing: bool) {
        // Recreating a node is a creation; repairing one a change.
        let priority = if missing {
            Priority::Backlog
        } else {
            Priority::Change
        };
        if self.busy.contains(name) {
            let p = self.dirty.entry(name.to_string()).or_insert(priority);
            *p = (*p).min(priority);
        } else {
            self.add(OutboxKey::Node(name.to_string()), priority);
        }
    }

    /// The next job to start, with the priority its requests take, if one is
    /// due and a worker is free. `in_flight` jobs run of at most `workers`.
    /// `missing` says which nodes are known missing upstream: their Leases
    /// wait until the Node is created.
    pub(crate) fn next(
        &mut self,
        now: Instant,
        hold_until: Instant,
        in_flight: usize,
        workers: usize,
        missing: &dyn Fn(&str) -> bool,
    ) -> Option<(Job, Priority)> {
        if in_flight >= workers {
            return None;
        }
        while let Some((at, _)) = self.delayed.first() {
            if *at > now {
                break;
            }
            let (_, key) = self.delayed.pop_first().expect("just seen");
            if self.queued.contains_key(&key) {
                self.make_ready(key);
            }
        }
        if let Some(job) = self.next_lease(now, missing) {
            return Some((job, Priority::Lease));
        }
        // The last quarter of the workers is kept for Lease renewals.
        if in_flight >= workers - workers / 4 {
            return None;
        }
        self.next_outbox(now, hold_until)
    }

    /// The next due Lease renewal of a Ready node that exists upstream.
    fn next_lease(&mut self, now: Instant, missing: &dyn Fn(&str) -> bool) -> Option<Job> {
        while let Some((at, name)) = self.leases_due.first().cloned() {
            if at > now {
                break;
            }
            self.leases_due.pop_first();
            self.lease_at.remove(&name);
            // A node not Ready lets its Lease expire; its next Ready
            // schedules it again.
            if !self.ready_nodes.contains(&name) {
                continue;
            }
            // A node missing upstream gets its Lease once it is created (then
            // at once); until then it is looked at again an interval on.
            if missing(&name) {
                if let Some(renew) = self.renew {
                    self.schedule_lease(&name, now + renew);
                }
                continue;
            }
            // One piece of work per node at a time: a renewal never races the
            // node's deletion (which deletes its Lease).
            if self.busy.contains(&name) {
                self.schedule_lease(&name, now + BUSY_RETRY);
                continue;
            }
            self.busy.insert(name.clone());
            return Some(Job::Lease(name));
        }
        None
    }

    /// The next outbox key whose node is not busy, highest priority first.
    fn next_outbox(&mut self, now: Instant, hold_until: Instant) -> Option<(Job, Priority)> {
        // Bounded by the ready set's size: each key is started, parked or held.
        while let Some((priority, _, key)) = self.ready.pop_first() {
            self.ready_index.remove(&key);
            let node = key.node().to_string();
            if self.busy.contains(&node) {
                self.parked.entry(node).or_default().push(key);
                continue;
            }
            if matches!(key, OutboxKey::EvictPods(_)) && now < hold_until {
                self.delayed.insert((hold_until, key));
                continue;
            }
            self.busy.insert(node);
            self.running.insert(key.clone(), false);
            return Some((Job::Outbox(key), priority));
        }
        None
    }

    /// Everything waiting out a backoff becomes due now, at `priority` when
    /// given (the backlog after an outage).
    fn retry_all_now(&mut self, priority: Option<Priority>) {
        for (_, key) in std::mem::take(&mut self.delayed) {
            if let Some(p) = priority {
                if let Some(q) = self.queued.get_mut(&key) {
                    *q = p.max(*q);
                }
            }
            if self.queued.contains_key(&key) {
                self.make_ready(key);
            }
        }
    }

    /// When the next timer is due.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        [
            self.leases_due.first().map(|(t, _)| *t),
            self.delayed.first().map(|(t, _)| *t),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// A job that was started ended, however: its node may take its next
    /// piece of work, and the outcome decides what comes next.
    pub(crate) fn finished(&mut self, job: Job, outcome: Outcome, now: Instant) -> Finished {
        let queued_again = self.release(&job);
        let node = job.node().to_string();
        let mut result = Finished::default();
        match outcome {
            Outcome::Done { created, again } => {
                self.attempts.remove(&job);
                match &job {
                    Job::Outbox(key) => {
                        // A node just created gets its Lease at once.
                        let name = key.node().to_string();
                        if created && self.ready_nodes.contains(&name) {
                            self.schedule_lease(&name, now);
                        }
                        if again || queued_again {
                            self.retry(job.clone(), now);
                        } else {
                            self.queued.remove(key);
                        }
                    }
                    Job::Lease(name) => {
                        if let Some(at) = self.next_renewal(name, now) {
                            self.schedule_lease(name, at);
                        }
                    }
                }
                result.recovered = self.recovered(now);
            }
            Outcome::Later(after) => {
                self.attempts.remove(&job);
                self.retry(job, now + after);
            }
            Outcome::Throttled(after) => {
                // Not a failure: the budget already waits the Retry-After out.
                self.retry(job, now + after);
            }
            Outcome::Failed {
                message,
                unreachable,
            } => {
                self.outage |= unreachable;
                let n = self.attempts.entry(job.clone()).or_insert(0);
                *n += 1;
                let delay = self.backoff.delay(*n - 1);
                tracing::debug!(?job, attempt = *n, "{message}");
                self.unlogged += 1;
                if self
                    .last_logged
                    .is_none_or(|t| now - t >= FAILURE_LOG_PERIOD)
                {
                    result.warn = Some(format!(
                        "API server requests failing (retried with backoff); {} failures, backlog {}; last: {message}",
                        self.unlogged,
                        self.outbox_len()
                    ));
                    self.unlogged = 0;
                    self.last_logged = Some(now);
                }
                self.retry(job, now + delay);
            }
        }
        self.requeue_dirty(&node);
        result
    }

    /// A job aborted (leadership lost) or panicked: its work stays queued.
    pub(crate) fn aborted(&mut self, job: Job, now: Instant) {
        self.release(&job);
        let node = job.node().to_string();
        self.retry(job, now);
        self.requeue_dirty(&node);
    }

    /// The API server answered (the watcher's list) after failing.
    pub(crate) fn answered(&mut self, now: Instant) -> bool {
        self.recovered(now)
    }

    /// Requests fail for want of an API server (the watcher's list).
    pub(crate) fn unreachable(&mut self) {
        self.outage = true;
    }

    fn recovered(&mut self, now: Instant) -> bool {
        if !std::mem::take(&mut self.outage) {
            return false;
        }
        self.renew_all_now(now);
        self.retry_all_now(Some(Priority::Backlog));
        self.attempts.clear();
        true
    }

    /// The job's node is free again; returns whether its outbox key was
    /// queued again while it ran.
    fn release(&mut self, job: &Job) -> bool {
        let queued_again = match job {
            Job::Outbox(key) => self.running.remove(key).unwrap_or(false),
            Job::Lease(_) => false,
        };
        let node = job.node().to_string();
        self.busy.remove(&node);
        if let Some(parked) = self.parked.remove(&node) {
            for key in parked {
                if self.queued.contains_key(&key) {
                    self.make_ready(key);
                }
            }
        }
        queued_again
    }

    /// A node seen changed upstream while its work ran is queued again.
    fn requeue_dirty(&mut self, node: &str) {
        if let Some(priority) = self.dirty.remove(node) {
            self.add(OutboxKey::Node(node.to_string()), priority);
        }
    }

    fn retry(&mut self, job: Job, at: Instant) {
        match job {
            Job::Outbox(key) => {
                self.delayed.insert((at, key));
            }
            Job::Lease(name) => self.schedule_lease(&name, at),
        }
    }
}

/// Where in the renewal interval a node's Lease falls, in [0, 1): a hash of
/// its name (FNV-1a, mixed), stable across restarts.
fn phase_of(name: &str) -> f64 {
    let mut hash = crate::liveness::fnv1a(name.as_bytes());
    // FNV's high bits barely move with the last characters (edge-00001,
    // edge-00002, ...): mixed as MurmurHash3 finishes.
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^= hash >> 33;
    (hash >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
pub(crate) mod tests;
