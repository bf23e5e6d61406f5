//! The schedule's rules, on paused time.

use super::*;
use crate::model::Micros;
use crate::store::records::tests::sample_node;

const RENEW: Duration = Duration::from_secs(10);

/// A view with `ready` nodes Ready and `down` nodes Unknown (the drain's
/// tests use it too).
pub(crate) fn view(ready: &[&str], down: &[&str]) -> View {
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

fn queue(now: Instant) -> Queue {
    Queue::new(now, Some(RENEW), crate::mirror::REQUEST_RETRY)
}

fn node(n: &str) -> OutboxKey {
    OutboxKey::Node(n.into())
}

fn pods(n: &str) -> OutboxKey {
    OutboxKey::EvictPods(n.into())
}

fn done() -> Outcome {
    Outcome::Done {
        created: false,
        again: false,
    }
}

fn failed(unreachable: bool) -> Outcome {
    Outcome::Failed {
        message: "connection refused".into(),
        unreachable,
    }
}

/// The next job, any worker free.
fn next(q: &mut Queue, now: Instant) -> Option<Job> {
    q.next(now, now, 0, 8, &|_| false).map(|(job, _)| job)
}

#[test]
fn one_piece_of_work_per_node_at_a_time_in_order() {
    let now = Instant::now();
    let mut q = queue(now);
    q.add(node("a"), Priority::Change);
    q.add(pods("a"), Priority::Change);
    q.add(node("b"), Priority::Change);
    q.add(node("a"), Priority::Change); // already queued: coalesced
    assert_eq!(q.outbox_len(), 3);
    assert_eq!(next(&mut q, now), Some(Job::Outbox(node("a"))));
    // a is busy: its pod eviction waits, b goes ahead.
    assert_eq!(next(&mut q, now), Some(Job::Outbox(node("b"))));
    assert_eq!(next(&mut q, now), None);
    q.finished(Job::Outbox(node("a")), done(), now);
    assert_eq!(next(&mut q, now), Some(Job::Outbox(pods("a"))));
    assert_eq!(q.outbox_len(), 2);
}

#[test]
fn pod_deletions_wait_for_the_hold_after_a_start() {
    let now = Instant::now();
    let hold = now + Duration::from_secs(40);
    let mut q = queue(now);
    q.add(pods("a"), Priority::Change);
    assert_eq!(q.next(now, hold, 0, 8, &|_| false), None);
    assert_eq!(q.next_due(), Some(hold));
    assert_eq!(
        q.next(hold, hold, 0, 8, &|_| false),
        Some((Job::Outbox(pods("a")), Priority::Change))
    );
}

#[test]
fn leases_go_first_then_changes_then_creations_and_the_backlog() {
    let now = Instant::now();
    let mut q = queue(now);
    q.add(node("new"), Priority::Backlog);
    q.add(node("old"), Priority::Backlog);
    q.add(node("tainted"), Priority::Change);
    q.lead(now, &view(&["up-1", "up-2"], &["new", "old", "tainted"]));
    let order: Vec<(Job, Priority)> = (0..5)
        .map_while(|_| q.next(now, now, 0, 8, &|_| false))
        .collect();
    assert_eq!(
        order,
        [
            (Job::Lease("up-1".into()), Priority::Lease),
            (Job::Lease("up-2".into()), Priority::Lease),
            (Job::Outbox(node("tainted")), Priority::Change),
            (Job::Outbox(node("new")), Priority::Backlog),
            (Job::Outbox(node("old")), Priority::Backlog),
        ]
    );
    // A fresh change to a node waiting in the backlog moves it up.
    let mut q = queue(now);
    q.add(node("a"), Priority::Backlog);
    q.add(node("b"), Priority::Backlog);
    q.add(node("b"), Priority::Change);
    assert_eq!(next(&mut q, now), Some(Job::Outbox(node("b"))));
}

#[test]
fn a_quarter_of_the_workers_is_kept_for_leases() {
    let now = Instant::now();
    let mut q = queue(now);
    for i in 0..10 {
        q.add(node(&format!("n{i}")), Priority::Backlog);
    }
    q.lead(now, &view(&["up"], &[]));
    // Six of eight workers busy: outbox work waits, a Lease still starts.
    assert_eq!(
        q.next(now, now, 6, 8, &|_| false),
        Some((Job::Lease("up".into()), Priority::Lease))
    );
    assert_eq!(q.next(now, now, 6, 8, &|_| false), None);
    assert!(q.next(now, now, 5, 8, &|_| false).is_some());
    assert_eq!(q.next(now, now, 8, 8, &|_| false), None);
}

#[test]
fn leases_of_nodes_not_ready_lapse_and_busy_nodes_wait() {
    let now = Instant::now();
    let mut q = queue(now);
    q.lead(now, &view(&["up"], &["down"]));
    q.schedule_lease("down", now);
    q.add(node("up"), Priority::Change);
    // The Lease goes first; then the node's change waits for it.
    assert_eq!(next(&mut q, now), Some(Job::Lease("up".into())));
    assert_eq!(next(&mut q, now), None);
    q.finished(Job::Lease("up".into()), done(), now);
    assert_eq!(next(&mut q, now), Some(Job::Outbox(node("up"))));
    // The next renewal falls due while the node is busy: it waits.
    let due = q.next_due().unwrap();
    assert!(
        due >= now + RENEW / 4 && due <= now + RENEW + RENEW / 4,
        "{:?}",
        due - now
    );
    assert_eq!(next(&mut q, due), None);
    assert_eq!(q.next_due(), Some(due + BUSY_RETRY));
    q.finished(Job::Outbox(node("up")), done(), due);
    let later = due + BUSY_RETRY;
    assert_eq!(next(&mut q, later), Some(Job::Lease("up".into())));
}

#[test]
fn renewals_spread_over_the_interval_each_at_its_own_phase() {
    let now = Instant::now();
    let q = queue(now);
    let names: Vec<String> = (0..1000).map(|i| format!("edge-{i:05}")).collect();
    let mut slots = [0usize; 10];
    for name in &names {
        let at = q.next_renewal(name, now).unwrap();
        let offset = (at - now).as_secs_f64();
        assert!((2.5..12.5).contains(&offset), "{offset}");
        // The phase stays: renewed on time, the next one is one interval on.
        assert_eq!(q.next_renewal(name, at).unwrap() - at, RENEW);
        // Renewed late, the next one keeps the phase, not the lateness.
        let late = at + Duration::from_secs(3);
        assert_eq!(q.next_renewal(name, late).unwrap(), at + RENEW);
        slots[((at - now).as_secs_f64() % 10.0) as usize] += 1;
    }
    // Evenly: each second of the interval holds about a tenth.
    for (second, n) in slots.iter().enumerate() {
        assert!((60..=140).contains(n), "second {second}: {n} of 1000");
    }
    let q = Queue::new(now, None, crate::mirror::REQUEST_RETRY);
    assert_eq!(q.next_renewal("a", now), None);
}

#[test]
fn without_lease_mirroring_no_lease_is_scheduled() {
    let now = Instant::now();
    let mut q = Queue::new(now, None, crate::mirror::REQUEST_RETRY);
    q.lead(now, &view(&["up"], &[]));
    assert_eq!(q.next_due(), None);
    assert_eq!(next(&mut q, now), None);
    assert_eq!(q.ready_count(), 1);
}

#[test]
fn a_node_missing_upstream_is_created_before_its_lease_is_renewed() {
    let now = Instant::now();
    let mut q = queue(now);
    q.lead(now, &view(&["a", "b"], &[]));
    // The API server came back empty: both nodes are missing.
    q.upstream_changed("a", true);
    q.upstream_changed("b", true);
    let missing = std::cell::RefCell::new(HashSet::from(["a", "b"]));
    let is_missing = |n: &str| missing.borrow().contains(n);
    assert_eq!(
        q.next(now, now, 0, 8, &is_missing),
        Some((Job::Outbox(node("a")), Priority::Backlog))
    );
    let created = Outcome::Done {
        created: true,
        again: false,
    };
    missing.borrow_mut().remove("a");
    q.finished(Job::Outbox(node("a")), created, now);
    // a exists now: its Lease is due at once; b's waits for its creation.
    assert_eq!(
        q.next(now, now, 0, 8, &is_missing),
        Some((Job::Lease("a".into()), Priority::Lease))
    );
    assert_eq!(
        q.next(now, now, 0, 8, &is_missing),
        Some((Job::Outbox(node("b")), Priority::Backlog))
    );
    assert_eq!(q.next(now, now, 0, 8, &is_missing), None);
    // b's Lease is looked at again an interval on.
    assert_eq!(q.next_due(), Some(now + RENEW));
}

#[test]
fn a_change_seen_upstream_while_the_node_is_busy_is_looked_at_when_done() {
    let now = Instant::now();
    let mut q = queue(now);
    q.add(node("a"), Priority::Change);
    assert_eq!(next(&mut q, now), Some(Job::Outbox(node("a"))));
    q.upstream_changed("a", false);
    assert_eq!(next(&mut q, now), None);
    q.finished(Job::Outbox(node("a")), done(), now);
    // Done, but someone changed it meanwhile: once more.
    assert_eq!(next(&mut q, now), Some(Job::Outbox(node("a"))));
    assert_eq!(q.outbox_len(), 1);
}

#[test]
fn a_failure_waits_its_backoff_unless_the_outage_ends() {
    let now = Instant::now();
    let mut q = queue(now);
    q.lead(now, &view(&["up"], &["a"]));
    q.add(node("a"), Priority::Change);
    assert_eq!(next(&mut q, now), Some(Job::Lease("up".into())));
    assert_eq!(next(&mut q, now), Some(Job::Outbox(node("a"))));
    let first = q.finished(Job::Lease("up".into()), failed(true), now);
    assert!(first.warn.is_some(), "the first failure is logged");
    let second = q.finished(Job::Outbox(node("a")), failed(true), now);
    assert_eq!(second.warn, None, "later ones are summed up");
    assert!(q.in_outage());
    assert_eq!(next(&mut q, now), None);
    let due = q.next_due().unwrap();
    assert!(due > now && due <= now + Duration::from_millis(500));
    // The watcher's list succeeds: everything is due at once, the
    // backlog behind the Leases.
    assert!(q.answered(now));
    assert!(!q.in_outage());
    assert_eq!(
        q.next(now, now, 0, 8, &|_| false),
        Some((Job::Lease("up".into()), Priority::Lease))
    );
    assert_eq!(
        q.next(now, now, 0, 8, &|_| false),
        Some((Job::Outbox(node("a")), Priority::Backlog))
    );
    assert!(!q.answered(now), "only once");
}

#[test]
fn throttling_and_holds_are_not_failures() {
    let now = Instant::now();
    let mut q = queue(now);
    q.add(node("a"), Priority::Change);
    let job = next(&mut q, now).unwrap();
    let wait = Duration::from_secs(3);
    let f = q.finished(job.clone(), Outcome::Throttled(wait), now);
    assert_eq!(f, Finished::default());
    assert!(!q.in_outage());
    assert_eq!(q.next_due(), Some(now + wait));
    assert_eq!(next(&mut q, now + wait), Some(job));
}

#[test]
fn following_the_log_queues_mirror_work_and_renewals() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("db"), &Default::default()).unwrap();
    store.enable_outbox();
    let mut batch = crate::store::Batch::new(Micros(1));
    let mut n = sample_node();
    n.conditions[0].status = ConditionStatus::True;
    batch.record(
        n.clone(),
        [EventKind::ConditionChanged {
            condition: crate::model::READY.into(),
            from: Some(ConditionStatus::Unknown),
            to: ConditionStatus::True,
            reason: "KubeletReady".into(),
            message: "ok".into(),
        }],
    );
    store.write(batch).unwrap();
    store.flush_blocking().unwrap();
    let view = View::default();
    view.publish([n], &[]);
    let now = Instant::now();
    let mut q = queue(now);
    let (seen, changed) = q.follow(&store, &view, 0, store.durable_seq(), now);
    assert_eq!(seen, store.durable_seq());
    assert!(changed, "one Ready node more");
    assert_eq!(q.outbox_len(), 1);
    assert_eq!(q.lease_at.get("edge-1"), Some(&now));
    assert_eq!(q.ready_count(), 1);
}

#[test]
fn an_entry_queued_again_while_its_work_runs_is_not_dropped_when_it_ends() {
    // The job clears the outbox entry it read (so it reports no newer one);
    // a change written just after recreates the entry, and the log is
    // followed before the job's end is seen. The entry must be worked again.
    let now = Instant::now();
    let mut q = queue(now);
    q.add(node("a"), Priority::Backlog);
    assert_eq!(next(&mut q, now), Some(Job::Outbox(node("a"))));
    q.add(node("a"), Priority::Change);
    q.finished(Job::Outbox(node("a")), done(), now);
    assert_eq!(q.outbox_len(), 1, "still owed");
    assert_eq!(next(&mut q, now), Some(Job::Outbox(node("a"))));
    q.finished(Job::Outbox(node("a")), done(), now);
    assert_eq!(q.outbox_len(), 0);
    assert_eq!(next(&mut q, now), None, "once is enough");
}
