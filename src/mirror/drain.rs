//! Where the outbox is drained: the mirror's decisions, one method per event
//! (leadership gained or lost, events followed from the log, the watcher's
//! report, work finished or aborted, a timer due), each saying what the I/O
//! shell in [`Mirror::run`](super::Mirror::run) does next. No I/O of its
//! own beyond reading the store and the view, so it is tested on paused time.
//!
//! The schedule itself (which job, when) is [`Queue`]'s; the drain adds who
//! may write (only the leader), how many requests may be in flight (the
//! budget's [`Plan`] for the Ready nodes), and what the API server's answers
//! mean for the mirror's status and the durable outbox.

use std::time::Duration;

use tokio::time::Instant;

use super::budget::Priority;
use super::capacity::{BudgetFlags, Plan};
use super::queue::{Job, Outcome, Queue};
use super::watch::Report;
use super::MirrorConfig;
use crate::store::{OutboxKey, Store};
use crate::view::View;

/// What the shell does after an event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Step {
    /// Leadership gained: open the watch of the API server's nodes.
    OpenWatch,
    /// Leadership ended: abort the work in flight (each comes back through
    /// [`Drain::aborted`]), close the watch, forget what it showed.
    StopLeading,
    /// Whether the mirror leads, for `mirror status` and the metric.
    ShowLeading(bool),
    /// The request budget for the Ready nodes: apply it, and say so when it
    /// moved or stopped (or started again) covering their Leases.
    Budget { plan: Plan, before: Option<Plan> },
    /// Nodes that differ upstream: put them in the durable outbox.
    Enqueue(Vec<OutboxKey>),
    /// For `mirror status`: the API server answered, or this failed.
    Note(Result<(), String>),
    /// A request failed and will be retried: count it.
    CountRetry,
}

/// The outbox drain's state.
pub(crate) struct Drain {
    queue: Queue,
    /// The last event of the log followed.
    seen: u64,
    renew: Option<Duration>,
    flags: BudgetFlags,
    /// The budget last planned; `None` while no plan was made since leading.
    plan: Option<Plan>,
    /// Requests in flight at once, at most.
    workers: usize,
    /// Jobs started and not yet finished or aborted.
    in_flight: usize,
    leading: bool,
    /// No pod is deleted before this.
    hold_until: Instant,
}

impl Drain {
    /// The drain of a mirror started at `now`, with the log followed up to
    /// `seen`, the outbox's `backlog` (waiting since before this start) and
    /// `ready` Ready nodes. Not leading yet.
    pub(crate) fn new(
        config: &MirrorConfig,
        now: Instant,
        seen: u64,
        backlog: impl IntoIterator<Item = OutboxKey>,
        ready: usize,
    ) -> (Drain, Vec<Step>) {
        let mut queue = Queue::new(now, config.node_lease_renew_interval, config.backoff);
        for key in backlog {
            queue.add(key, Priority::Backlog);
        }
        let mut drain = Drain {
            queue,
            seen,
            renew: config.node_lease_renew_interval,
            flags: config.budget,
            plan: None,
            workers: 0,
            in_flight: 0,
            leading: false,
            hold_until: now + config.eviction_hold,
        };
        let steps = vec![drain.replan(ready)];
        (drain, steps)
    }

    /// Outbox entries waiting.
    pub(crate) fn backlog(&self) -> usize {
        self.queue.outbox_len()
    }

    /// The next job to start now, if leading, one is due and a worker is
    /// free. `missing` says which nodes are known missing upstream.
    pub(crate) fn next_job(
        &mut self,
        now: Instant,
        missing: &dyn Fn(&str) -> bool,
    ) -> Option<(Job, Priority)> {
        if !self.leading {
            return None;
        }
        let next = self
            .queue
            .next(now, self.hold_until, self.in_flight, self.workers, missing)?;
        self.in_flight += 1;
        Some(next)
    }

    /// When to look for due work again, with nothing else happening. At
    /// capacity the next completion wakes the shell: a timer already due
    /// would only spin it.
    pub(crate) fn wake(&self) -> Option<Instant> {
        if self.leading && self.in_flight < self.workers {
            self.queue.next_due()
        } else {
            None
        }
    }

    /// The elector says whether we lead. `stopping`: the mirror is shutting
    /// down (giving leadership up is then no news).
    pub(crate) fn leadership(
        &mut self,
        leading: bool,
        view: &View,
        now: Instant,
        stopping: bool,
    ) -> Vec<Step> {
        match (self.leading, leading) {
            (false, true) => {
                tracing::info!("leading: writing to the API server");
                self.leading = true;
                self.queue.lead(now, view);
                // Planned afresh: what was said before leading is said again.
                self.plan = None;
                let ready = self.queue.ready_count();
                vec![self.replan(ready), Step::OpenWatch, Step::ShowLeading(true)]
            }
            (true, false) => {
                if stopping {
                    tracing::info!("stopping: leadership given up");
                } else {
                    tracing::warn!("no longer leading: writes to the API server stop");
                }
                self.stop_leading()
            }
            _ => Vec::new(),
        }
    }

    /// The elector ended: nobody vouches for leadership any more.
    pub(crate) fn elector_ended(&mut self) -> Vec<Step> {
        if self.leading {
            tracing::error!("leader election ended; writes to the API server stop");
            return self.stop_leading();
        }
        vec![Step::ShowLeading(false)]
    }

    fn stop_leading(&mut self) -> Vec<Step> {
        self.leading = false;
        self.queue.lost_lead();
        vec![Step::StopLeading, Step::ShowLeading(false)]
    }

    /// The event log is durable up to `durable`: the outbox entries of the
    /// events since the last call are queued, and Leases follow the Ready
    /// nodes (the budget with them).
    pub(crate) fn followed(
        &mut self,
        store: &Store,
        view: &View,
        durable: u64,
        now: Instant,
    ) -> Vec<Step> {
        let (seen, ready_changed) = self.queue.follow(store, view, self.seen, durable, now);
        self.seen = seen;
        if ready_changed {
            let ready = self.queue.ready_count();
            return vec![self.replan(ready)];
        }
        Vec::new()
    }

    /// What the watcher saw of the API server's nodes.
    pub(crate) fn report(&mut self, report: Report, now: Instant) -> Vec<Step> {
        let mut steps = Vec::new();
        let stale = match report {
            Report::Failed {
                message,
                unreachable,
            } => {
                if unreachable {
                    self.queue.unreachable();
                }
                tracing::debug!("{message}");
                return vec![Step::Note(Err(message))];
            }
            Report::Listed(stale) => {
                steps.push(Step::Note(Ok(())));
                if self.queue.answered(now) {
                    tracing::info!(
                        backlog = self.queue.outbox_len(),
                        "the API server answers again; draining the backlog"
                    );
                }
                if !stale.is_empty() {
                    let missing = stale.iter().filter(|(_, m)| *m).count();
                    tracing::info!(
                        missing,
                        differ = stale.len() - missing,
                        "nodes missing or different on the API server; queued"
                    );
                }
                stale
            }
            Report::Changed(name, missing) => {
                tracing::debug!(node = %name, missing, "node changed on the API server; queued");
                vec![(name, missing)]
            }
        };
        let keys: Vec<OutboxKey> = stale
            .iter()
            .map(|(name, _)| OutboxKey::Node(name.clone()))
            .collect();
        for (name, missing) in stale {
            self.queue.upstream_changed(&name, missing);
        }
        if !keys.is_empty() {
            steps.push(Step::Enqueue(keys));
        }
        steps
    }

    /// A job started by [`Drain::next_job`] ended with `outcome`.
    pub(crate) fn finished(&mut self, job: Job, outcome: Outcome, now: Instant) -> Vec<Step> {
        self.in_flight = self.in_flight.saturating_sub(1);
        let failed = matches!(outcome, Outcome::Failed { .. });
        let finished = self.queue.finished(job, outcome, now);
        if let Some(warning) = finished.warn {
            tracing::warn!("{warning}");
        }
        if finished.recovered {
            tracing::info!(
                backlog = self.queue.outbox_len(),
                "the API server answers again; draining the backlog"
            );
        }
        if failed {
            vec![Step::CountRetry]
        } else {
            Vec::new()
        }
    }

    /// A job started by [`Drain::next_job`] was aborted (leadership lost)
    /// or panicked: its work stays queued.
    pub(crate) fn aborted(&mut self, job: Job, now: Instant) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.queue.aborted(job, now);
    }

    /// Shutting down: no more writes.
    pub(crate) fn shutdown(&mut self) -> Vec<Step> {
        self.leading = false;
        vec![Step::ShowLeading(false)]
    }

    /// The budget for `ready` Ready nodes, and how many may be in flight.
    fn replan(&mut self, ready: usize) -> Step {
        let plan = Plan::new(ready, self.renew, self.flags);
        self.workers = plan.workers();
        let before = self.plan.replace(plan.clone());
        Step::Budget { plan, before }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mirror::client::ApiServer;
    use crate::mirror::queue::tests::view;
    use crate::model::{ConditionStatus, EventKind, Micros, READY};
    use crate::store::records::tests::sample_node;
    use crate::store::Batch;

    const RENEW: Duration = Duration::from_secs(10);
    const HOLD: Duration = Duration::from_secs(40);
    /// Requests in flight at the smallest sized budget (20/s).
    const WORKERS: usize = 8;

    fn config() -> MirrorConfig {
        let mut config = MirrorConfig::new(ApiServer::Master("http://127.0.0.1:1".into()));
        config.node_lease_renew_interval = Some(RENEW);
        config.eviction_hold = HOLD;
        config
    }

    fn node(n: &str) -> OutboxKey {
        OutboxKey::Node(n.into())
    }

    fn done() -> Outcome {
        Outcome::Done {
            created: false,
            again: false,
        }
    }

    /// Every job due now, as the shell starts them (nothing missing upstream).
    fn start_due(drain: &mut Drain) -> Vec<Job> {
        std::iter::from_fn(|| drain.next_job(Instant::now(), &|_| false))
            .map(|(job, _)| job)
            .collect()
    }

    /// A drain with `backlog` waiting, leading over `view`.
    fn leading(backlog: &[OutboxKey], view: &View) -> Drain {
        let (mut drain, _) = Drain::new(&config(), Instant::now(), 0, backlog.to_vec(), 0);
        drain.leadership(true, view, Instant::now(), false);
        drain
    }

    fn planned(steps: &[Step]) -> Vec<(usize, Option<usize>)> {
        steps
            .iter()
            .filter_map(|s| match s {
                Step::Budget { plan, before } => {
                    Some((plan.ready, before.as_ref().map(|b| b.ready)))
                }
                _ => None,
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_written_before_leading_and_leading_opens_the_watch() {
        let view = view(&["up"], &["a"]);
        let (mut drain, steps) = Drain::new(&config(), Instant::now(), 0, [node("a")], 1);
        assert_eq!(
            planned(&steps),
            [(1, None)],
            "the budget is planned at start"
        );
        assert_eq!(start_due(&mut drain), []);
        assert_eq!(drain.wake(), None, "no timer while not leading");

        let steps = drain.leadership(true, &view, Instant::now(), false);
        assert_eq!(planned(&steps), [(1, None)], "planned afresh when leading");
        assert_eq!(steps[1..], [Step::OpenWatch, Step::ShowLeading(true)]);
        // The Ready node's Lease first, then the backlog.
        assert_eq!(
            start_due(&mut drain),
            [Job::Lease("up".into()), Job::Outbox(node("a"))]
        );
        assert_eq!(drain.leadership(true, &view, Instant::now(), false), []);
    }

    #[tokio::test(start_paused = true)]
    async fn at_capacity_a_completion_wakes_the_shell_not_a_timer() {
        let backlog: Vec<OutboxKey> = (0..20).map(|i| node(&format!("n{i}"))).collect();
        let mut drain = leading(&backlog, &view(&[], &[]));
        // A quarter of the workers is kept for Leases.
        let started = start_due(&mut drain);
        assert_eq!(started.len(), WORKERS - WORKERS / 4);
        assert_eq!(drain.wake(), None);
        let first = started[0].clone();
        drain.finished(first, done(), Instant::now());
        assert_eq!(start_due(&mut drain), [Job::Outbox(node("n6"))]);
        assert_eq!(drain.backlog(), 19);

        // Every worker busy (Leases too): no timer, even one already due.
        let ready: Vec<String> = (0..10).map(|i| format!("up{i}")).collect();
        let names: Vec<&str> = ready.iter().map(String::as_str).collect();
        let mut drain = leading(&[], &view(&names, &[]));
        assert_eq!(start_due(&mut drain).len(), WORKERS);
        assert_eq!(
            drain.wake(),
            None,
            "two Leases are due, but no worker is free"
        );
        drain.finished(Job::Lease("up0".into()), done(), Instant::now());
        assert_eq!(drain.wake(), Some(Instant::now()));
        assert_eq!(start_due(&mut drain), [Job::Lease("up8".into())]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_is_renewed_again_when_its_time_comes() {
        let mut drain = leading(&[], &view(&["up"], &[]));
        assert_eq!(start_due(&mut drain), [Job::Lease("up".into())]);
        assert_eq!(
            drain.finished(Job::Lease("up".into()), done(), Instant::now()),
            []
        );
        let due = drain.wake().expect("the next renewal is timed");
        let wait = due - Instant::now();
        assert!(wait >= RENEW / 4 && wait <= RENEW + RENEW / 4, "{wait:?}");
        assert_eq!(start_due(&mut drain), []);
        tokio::time::sleep_until(due).await;
        assert_eq!(start_due(&mut drain), [Job::Lease("up".into())]);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_are_counted_and_retried_after_a_backoff_or_when_the_api_server_answers() {
        let mut drain = leading(&[node("a")], &view(&[], &[]));
        assert_eq!(start_due(&mut drain), [Job::Outbox(node("a"))]);
        let failed = Outcome::Failed {
            message: "connection refused".into(),
            unreachable: true,
        };
        let steps = drain.finished(Job::Outbox(node("a")), failed.clone(), Instant::now());
        assert_eq!(steps, [Step::CountRetry]);
        assert_eq!(start_due(&mut drain), []);
        let retry = drain.wake().expect("retried with backoff");
        assert!(retry > Instant::now());
        tokio::time::sleep_until(retry).await;
        assert_eq!(start_due(&mut drain), [Job::Outbox(node("a"))]);
        drain.finished(Job::Outbox(node("a")), failed, Instant::now());
        assert_eq!(start_due(&mut drain), []);

        // The watcher's list is answered: the backlog is tried at once.
        let steps = drain.report(Report::Listed(Vec::new()), Instant::now());
        assert_eq!(steps, [Step::Note(Ok(()))]);
        assert_eq!(start_due(&mut drain), [Job::Outbox(node("a"))]);
        assert_eq!(
            drain.finished(Job::Outbox(node("a")), done(), Instant::now()),
            []
        );
        assert_eq!(drain.backlog(), 0);
        assert_eq!(drain.wake(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn losing_leadership_stops_the_work_and_keeps_it_queued() {
        let view = view(&[], &[]);
        let mut drain = leading(&[node("a"), node("b")], &view);
        assert_eq!(start_due(&mut drain).len(), 2);
        let steps = drain.leadership(false, &view, Instant::now(), false);
        assert_eq!(steps, [Step::StopLeading, Step::ShowLeading(false)]);
        // The shell aborts both; nothing starts meanwhile.
        assert_eq!(drain.wake(), None);
        drain.aborted(Job::Outbox(node("a")), Instant::now());
        assert_eq!(start_due(&mut drain), []);
        drain.aborted(Job::Outbox(node("b")), Instant::now());
        assert_eq!(drain.backlog(), 2);
        assert_eq!(drain.leadership(false, &view, Instant::now(), false), []);

        drain.leadership(true, &view, Instant::now(), false);
        assert_eq!(
            start_due(&mut drain),
            [Job::Outbox(node("a")), Job::Outbox(node("b"))]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_elector_ending_stops_writes() {
        let view = view(&["up"], &[]);
        let mut drain = leading(&[], &view);
        assert_eq!(
            drain.elector_ended(),
            [Step::StopLeading, Step::ShowLeading(false)]
        );
        assert_eq!(start_due(&mut drain), []);
        let (mut standby, _) = Drain::new(&config(), Instant::now(), 0, [], 0);
        assert_eq!(standby.elector_ended(), [Step::ShowLeading(false)]);
        assert_eq!(drain.shutdown(), [Step::ShowLeading(false)]);
    }

    #[tokio::test(start_paused = true)]
    async fn what_the_watcher_sees_is_queued_durably_and_noted() {
        let mut drain = leading(&[], &view(&[], &[]));
        let steps = drain.report(Report::Changed("b".into(), true), Instant::now());
        assert_eq!(
            steps,
            [Step::Enqueue(vec![node("b")])],
            "an event is no list"
        );
        assert_eq!(
            drain.next_job(Instant::now(), &|_| false),
            Some((Job::Outbox(node("b")), Priority::Backlog)),
            "a missing node is a creation"
        );
        // Seen differing again while its work runs: once more when it ends.
        assert_eq!(
            drain.report(Report::Changed("b".into(), false), Instant::now()),
            [Step::Enqueue(vec![node("b")])]
        );
        assert_eq!(start_due(&mut drain), []);
        drain.finished(Job::Outbox(node("b")), done(), Instant::now());
        assert_eq!(
            drain.next_job(Instant::now(), &|_| false),
            Some((Job::Outbox(node("b")), Priority::Change))
        );

        let failed = Report::Failed {
            message: "list: connection refused".into(),
            unreachable: true,
        };
        assert_eq!(
            drain.report(failed, Instant::now()),
            [Step::Note(Err("list: connection refused".into()))]
        );
        let listed = Report::Listed(vec![("c".into(), false), ("d".into(), true)]);
        assert_eq!(
            drain.report(listed, Instant::now()),
            [
                Step::Note(Ok(())),
                Step::Enqueue(vec![node("c"), node("d")])
            ]
        );
        assert_eq!(
            start_due(&mut drain),
            [Job::Outbox(node("c")), Job::Outbox(node("d"))]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn entries_followed_from_the_log_are_drained_and_the_budget_follows_the_ready_nodes() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db"), &Default::default()).unwrap();
        store.enable_outbox();
        let mut n = sample_node();
        n.conditions[0].status = ConditionStatus::True;
        let mut batch = Batch::new(Micros(1));
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
        let view = View::default();
        let mut drain = leading(&[], &view);
        view.publish([n.clone()], &[]);

        let steps = drain.followed(&store, &view, store.durable_seq(), Instant::now());
        assert_eq!(planned(&steps), [(1, Some(0))]);
        // Its Lease first; its Node once the Lease is done (one piece of
        // work per node at a time).
        assert_eq!(start_due(&mut drain), [Job::Lease(n.name.clone())]);
        drain.finished(Job::Lease(n.name.clone()), done(), Instant::now());
        assert_eq!(start_due(&mut drain), [Job::Outbox(node(&n.name))]);
        // Followed already: nothing twice.
        let steps = drain.followed(&store, &view, store.durable_seq(), Instant::now());
        assert_eq!(steps, []);
        assert_eq!(drain.backlog(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_written_after_the_work_cleared_its_entry_is_not_stranded() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db"), &Default::default()).unwrap();
        store.enable_outbox();
        let mut n = sample_node();
        n.conditions[0].status = ConditionStatus::Unknown;
        let changed = |n: &crate::model::Node, at, from, to| {
            let mut batch = Batch::new(Micros(at));
            batch.record(
                n.clone(),
                [EventKind::ConditionChanged {
                    condition: READY.into(),
                    from: Some(from),
                    to,
                    reason: "probe".into(),
                    message: "".into(),
                }],
            );
            store.write(batch).unwrap();
            store.flush_blocking().unwrap();
        };
        changed(&n, 1, ConditionStatus::True, ConditionStatus::Unknown);
        let view = View::default();
        view.publish([n.clone()], &[]);
        let mut drain = leading(&[], &view);
        drain.followed(&store, &view, store.durable_seq(), Instant::now());
        let key = node(&n.name);
        assert_eq!(start_due(&mut drain), [Job::Outbox(key.clone())]);

        // The work sends the node and clears the entry it read...
        let seq = store.outbox_entry(&key).unwrap().expect("queued").seq;
        assert!(store.outbox_done(&key, seq).unwrap(), "nothing newer yet");
        // ...then the node changes again (a new entry), and the log is
        // followed before the work's end is seen.
        changed(&n, 2, ConditionStatus::Unknown, ConditionStatus::False);
        drain.followed(&store, &view, store.durable_seq(), Instant::now());
        let ended = Outcome::Done {
            created: false,
            again: false,
        };
        drain.finished(Job::Outbox(key.clone()), ended, Instant::now());

        assert!(store.outbox_entry(&key).unwrap().is_some(), "still owed");
        assert_eq!(
            start_due(&mut drain),
            [Job::Outbox(key)],
            "the new entry is worked"
        );
        assert_eq!(drain.backlog(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn pods_are_not_deleted_before_the_hold_after_a_start() {
        let pods = OutboxKey::EvictPods("a".into());
        let started = Instant::now();
        let mut drain = leading(std::slice::from_ref(&pods), &view(&[], &["a"]));
        assert_eq!(start_due(&mut drain), []);
        assert_eq!(drain.wake(), Some(started + HOLD));
        tokio::time::sleep_until(started + HOLD).await;
        assert_eq!(start_due(&mut drain), [Job::Outbox(pods)]);
    }
}
