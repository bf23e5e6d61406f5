//! The mirror's schedule: which piece of work starts next. Pure state, no
//! I/O, so its rules are tested directly.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use super::{Job, BUSY_RETRY, FOLLOW_BATCH};
use crate::controller::view::View;
use crate::model::{ConditionStatus, EventKind, READY};
use crate::store::{HistoryQuery, OutboxKey, Store};

/// The mirror's schedule: outbox work ready or waiting out a backoff, one
/// piece per node at a time; Lease renewals by due time; the reconcile.
#[derive(Default)]
pub(super) struct Queue {
    /// Every outbox key known to be queued, whatever its state.
    queued: HashSet<OutboxKey>,
    ready: VecDeque<OutboxKey>,
    delayed: BTreeSet<(Instant, OutboxKey)>,
    /// Keys whose node has work in flight, resumed when it finishes.
    parked: HashMap<String, Vec<OutboxKey>>,
    busy: HashSet<String>,
    leases_due: BTreeSet<(Instant, String)>,
    lease_at: HashMap<String, Instant>,
    pub(super) reconcile_due: Option<Instant>,
    /// Whose turn it is when both a Lease and outbox work are due.
    outbox_turn: bool,
}

impl Queue {
    pub(super) fn outbox_len(&self) -> usize {
        self.queued.len()
    }

    /// A key now in the outbox (again): queued unless it already is.
    pub(super) fn add(&mut self, key: OutboxKey) {
        if self.queued.insert(key.clone()) {
            self.ready.push_back(key);
        }
    }

    pub(super) fn schedule_lease(&mut self, name: &str, at: Instant) {
        if let Some(old) = self.lease_at.get(name) {
            if *old <= at {
                return;
            }
            self.leases_due.remove(&(*old, name.to_string()));
        }
        self.lease_at.insert(name.to_string(), at);
        self.leases_due.insert((at, name.to_string()));
    }

    /// Leadership gained: reconcile with the API server, renew every Ready
    /// node's Lease, and try everything waiting now.
    pub(super) fn lead(&mut self, now: Instant, view: &View) {
        self.reconcile_due = Some(now);
        self.renew_all_now(now, view);
        self.retry_all_now();
    }

    /// Every Ready node's Lease is due now.
    pub(super) fn renew_all_now(&mut self, now: Instant, view: &View) {
        for (node, _) in view.list() {
            if node.ready() == ConditionStatus::True {
                self.schedule_lease(&node.name, now);
            }
        }
    }

    /// Queues the work of the events durable since `seen`; returns the new `seen`.
    pub(super) fn follow(
        &mut self,
        store: &Store,
        mut seen: u64,
        durable: u64,
        now: Instant,
    ) -> u64 {
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
                    return seen;
                }
            };
            let Some(last) = events.last().map(|e| e.seq) else {
                return durable;
            };
            for e in &events {
                let Some(node) = &e.node else { continue };
                for (key, _) in OutboxKey::for_event(node, &e.kind) {
                    self.add(key);
                }
                if let EventKind::ConditionChanged {
                    condition,
                    to: ConditionStatus::True,
                    ..
                } = &e.kind
                {
                    if condition == READY {
                        self.schedule_lease(node, now);
                    }
                }
            }
            seen = last;
        }
        seen
    }

    /// The next job to start, if any is due: the reconcile first, then Lease
    /// renewals and outbox work taking turns, so neither starves the other
    /// when the budget cannot cover both.
    pub(super) fn next(&mut self, now: Instant, view: &View, hold_until: Instant) -> Option<Job> {
        if self.reconcile_due.is_some_and(|t| t <= now) {
            self.reconcile_due = None;
            return Some(Job::Reconcile);
        }
        while let Some((at, _)) = self.delayed.first() {
            if *at > now {
                break;
            }
            let (_, key) = self.delayed.pop_first().expect("just seen");
            self.ready.push_back(key);
        }
        let job = if self.outbox_turn {
            self.next_outbox(now, hold_until)
                .or_else(|| self.next_lease(now, view))
        } else {
            self.next_lease(now, view)
                .or_else(|| self.next_outbox(now, hold_until))
        };
        if let Some(job) = &job {
            self.outbox_turn = matches!(job, Job::Lease(_));
        }
        job
    }

    /// The next due Lease renewal of a Ready node.
    pub(super) fn next_lease(&mut self, now: Instant, view: &View) -> Option<Job> {
        while let Some((at, name)) = self.leases_due.first().cloned() {
            if at > now {
                break;
            }
            self.leases_due.pop_first();
            self.lease_at.remove(&name);
            let ready = view
                .get(&name)
                .is_some_and(|(n, _)| n.ready() == ConditionStatus::True);
            // A node not Ready lets its Lease expire; its next Ready schedules it again.
            if !ready {
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

    /// The next outbox key whose node is not busy.
    pub(super) fn next_outbox(&mut self, now: Instant, hold_until: Instant) -> Option<Job> {
        // Bounded by the ready queue's length: each key is started, parked or held.
        while let Some(key) = self.ready.pop_front() {
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
            return Some(Job::Outbox(key));
        }
        None
    }

    /// Everything waiting out a backoff becomes due now.
    pub(super) fn retry_all_now(&mut self) {
        for (_, key) in std::mem::take(&mut self.delayed) {
            self.ready.push_back(key);
        }
    }

    /// When the next timer is due.
    pub(super) fn next_due(&self) -> Option<Instant> {
        [
            self.reconcile_due,
            self.leases_due.first().map(|(t, _)| *t),
            self.delayed.first().map(|(t, _)| *t),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// A job ended (however): its node may take its next piece of work.
    pub(super) fn finished(&mut self, job: &Job) {
        let node = match job {
            Job::Outbox(key) => key.node(),
            Job::Lease(name) => name.as_str(),
            Job::Reconcile => return,
        };
        self.busy.remove(node);
        if let Some(parked) = self.parked.remove(node) {
            for key in parked.into_iter().rev() {
                self.ready.push_front(key);
            }
        }
    }

    pub(super) fn after_success(&mut self, job: &Job, now: Instant, renew: Duration) {
        match job {
            Job::Outbox(key) => {
                self.queued.remove(key);
            }
            Job::Lease(name) => self.schedule_lease(name, now + renew),
            Job::Reconcile => {}
        }
    }

    pub(super) fn retry(&mut self, job: Job, at: Instant) {
        match job {
            Job::Outbox(key) => {
                self.delayed.insert((at, key));
            }
            Job::Lease(name) => self.schedule_lease(&name, at),
            Job::Reconcile => self.reconcile_due = Some(at),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Micros;
    use crate::store::records::tests::sample_node;

    fn view(ready: &[&str], down: &[&str]) -> View {
        let view = View::default();
        let node = |name: &str, status| {
            let mut n = sample_node();
            n.name = name.into();
            n.conditions[0].status = status;
            n
        };
        view.publish(
            ready
                .iter()
                .map(|n| node(n, ConditionStatus::True))
                .chain(down.iter().map(|n| node(n, ConditionStatus::Unknown))),
            &[],
        );
        view
    }

    fn node(n: &str) -> OutboxKey {
        OutboxKey::Node(n.into())
    }

    fn pods(n: &str) -> OutboxKey {
        OutboxKey::EvictPods(n.into())
    }

    #[test]
    fn one_piece_of_work_per_node_at_a_time_in_order() {
        let view = view(&[], &["a", "b"]);
        let now = Instant::now();
        let mut q = Queue::default();
        q.add(node("a"));
        q.add(pods("a"));
        q.add(node("b"));
        q.add(node("a")); // already queued: coalesced
        assert_eq!(q.outbox_len(), 3);
        assert_eq!(q.next(now, &view, now), Some(Job::Outbox(node("a"))));
        // a is busy: its pod eviction waits, b goes ahead.
        assert_eq!(q.next(now, &view, now), Some(Job::Outbox(node("b"))));
        assert_eq!(q.next(now, &view, now), None);
        q.finished(&Job::Outbox(node("a")));
        q.after_success(&Job::Outbox(node("a")), now, Duration::from_secs(10));
        assert_eq!(q.next(now, &view, now), Some(Job::Outbox(pods("a"))));
        assert_eq!(q.outbox_len(), 2);
    }

    #[test]
    fn pod_deletions_wait_for_the_hold_after_a_start() {
        let view = view(&[], &["a"]);
        let now = Instant::now();
        let hold = now + Duration::from_secs(40);
        let mut q = Queue::default();
        q.add(pods("a"));
        assert_eq!(q.next(now, &view, hold), None);
        assert_eq!(q.next_due(), Some(hold));
        assert_eq!(q.next(hold, &view, hold), Some(Job::Outbox(pods("a"))));
    }

    #[test]
    fn leases_and_outbox_work_take_turns() {
        let view = view(&["a", "b", "c"], &[]);
        let now = Instant::now();
        let mut q = Queue::default();
        q.renew_all_now(now, &view);
        for n in ["d", "e", "f"] {
            q.add(node(n));
        }
        let kinds: Vec<&str> = (0..6)
            .map(|_| match q.next(now, &view, now) {
                Some(Job::Lease(_)) => "lease",
                Some(Job::Outbox(_)) => "outbox",
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            kinds,
            ["lease", "outbox", "lease", "outbox", "lease", "outbox"]
        );
    }

    #[test]
    fn leases_of_nodes_not_ready_lapse_and_busy_nodes_wait() {
        let view = view(&["up"], &["down"]);
        let now = Instant::now();
        let mut q = Queue::default();
        q.schedule_lease("down", now);
        q.add(node("up"));
        assert_eq!(q.next(now, &view, now), Some(Job::Outbox(node("up"))));
        q.schedule_lease("up", now);
        // "down" lapses; "up" is busy with its node, so its renewal waits.
        assert_eq!(q.next(now, &view, now), None);
        assert_eq!(q.next_due(), Some(now + BUSY_RETRY));
        q.finished(&Job::Outbox(node("up")));
        let later = now + BUSY_RETRY;
        assert_eq!(q.next(later, &view, later), Some(Job::Lease("up".into())));
        q.finished(&Job::Lease("up".into()));
        q.after_success(&Job::Lease("up".into()), later, Duration::from_secs(10));
        assert_eq!(q.next_due(), Some(later + Duration::from_secs(10)));
    }

    #[test]
    fn a_failure_waits_its_backoff_unless_the_outage_ends() {
        let view = view(&[], &["a"]);
        let now = Instant::now();
        let mut q = Queue::default();
        q.add(node("a"));
        let job = q.next(now, &view, now).unwrap();
        q.finished(&job);
        q.retry(job.clone(), now + Duration::from_secs(30));
        assert_eq!(q.next(now, &view, now), None);
        assert_eq!(q.next_due(), Some(now + Duration::from_secs(30)));
        q.retry_all_now();
        assert_eq!(q.next(now, &view, now), Some(job));
    }

    #[test]
    fn following_the_log_queues_mirror_work_and_renewals() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db"), &Default::default()).unwrap();
        store.enable_outbox();
        let mut batch = crate::store::Batch::new(Micros(1));
        let n = sample_node();
        batch.record(
            n.clone(),
            [EventKind::ConditionChanged {
                condition: READY.into(),
                from: Some(ConditionStatus::Unknown),
                to: ConditionStatus::True,
                reason: "KubeletReady".into(),
                message: "ok".into(),
            }],
        );
        store.write(batch).unwrap();
        store.flush_blocking().unwrap();
        let now = Instant::now();
        let mut q = Queue::default();
        let seen = q.follow(&store, 0, store.durable_seq(), now);
        assert_eq!(seen, store.durable_seq());
        assert_eq!(q.outbox_len(), 1);
        assert_eq!(q.lease_at.get("edge-1"), Some(&now));
    }
}
