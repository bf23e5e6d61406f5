//! Store tests for history that lasts: the time index, pages, checkpoints,
//! retention (with readers pinned and pins expiring), and exports that carry
//! every tree.
// Synchronous tests of a synchronous store: real time and blocking waits are right here.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::BTreeMap;

use super::retention::TailBytes;
use super::*;
use crate::history::replay;
use crate::model::{ConditionStatus, EventKind};
use crate::store::records::tests::sample_node;

fn open() -> (tempfile::TempDir, Store) {
    open_every(None)
}

/// A store that writes a checkpoint every `every` events (the default needs
/// ten thousand or more, which takes a debug build a while to write).
fn open_every(every: Option<u64>) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        checkpoint_interval: every,
        ..StoreOptions::default()
    };
    let store = Store::open(&dir.path().join("db"), &options).unwrap();
    (dir, store)
}

/// The last seq written at or before `cutoff` (the writes' times only grow here).
fn last_before(events: &[Event], cutoff: Micros) -> u64 {
    events
        .iter()
        .filter(|e| e.time <= cutoff)
        .map(|e| e.seq)
        .max()
        .unwrap()
}

fn node(name: &str) -> Node {
    let mut n = sample_node();
    n.name = name.into();
    n
}

fn ready(to: ConditionStatus) -> EventKind {
    EventKind::ConditionChanged {
        condition: "Ready".into(),
        from: None,
        to,
        reason: "r".into(),
        message: "m".into(),
    }
}

/// Registers `nodes` nodes at time 0, then flips one node's Ready per event,
/// `batch` events per write, the writes a second apart per event, until
/// about `events` events. Now and then a node is deleted and registered
/// again. The registry records agree with the history, as the controller's do.
fn flapping(store: &Store, nodes: usize, events: u64, batch: u64) {
    let mut current: BTreeMap<String, Node> = BTreeMap::new();
    let mut b = Batch::new(Micros(0));
    for i in 0..nodes {
        let n = node(&format!("n{i:03}"));
        current.insert(n.name.clone(), n.clone());
        b.record(n.clone(), [EventKind::Registered { node: Box::new(n) }]);
    }
    store.write(b).unwrap();
    let mut k = 0u64;
    while store.last_seq() < events {
        let time = Micros(store.last_seq() as i64 * 1_000_000);
        let mut b = Batch::new(time);
        let mut again = Vec::new();
        for _ in 0..batch.min(events - store.last_seq()) {
            let i = (k * 7 % nodes as u64) as usize;
            let name = format!("n{i:03}");
            k += 1;
            if i.is_multiple_of(10) && k.is_multiple_of(50) && !again.contains(&name) {
                b.delete(&name, "gone");
                again.push(name);
                continue;
            }
            if again.contains(&name) {
                continue;
            }
            let n = current.get_mut(&name).unwrap();
            let status = if n.ready() == ConditionStatus::True {
                ConditionStatus::False
            } else {
                ConditionStatus::True
            };
            let c = n.condition_mut("Ready").unwrap();
            c.status = status;
            c.last_transition = time;
            c.last_heartbeat = time;
            b.record(n.clone(), [ready(status)]);
        }
        store.write(b).unwrap();
        if !again.is_empty() {
            let mut b = Batch::new(time);
            for name in again {
                let n = node(&name);
                current.insert(name, n.clone());
                b.record(n.clone(), [EventKind::Registered { node: Box::new(n) }]);
            }
            store.write(b).unwrap();
        }
    }
    store.flush_blocking().unwrap();
}

fn all(store: &Store) -> Vec<Event> {
    store.history(&HistoryQuery::default()).unwrap()
}

fn replayed_at(events: &[Event], seq: u64) -> BTreeMap<String, Node> {
    replay(events.iter().filter(|e| e.seq <= seq))
}

#[test]
fn time_ranges_are_seq_ranges_even_when_the_clock_steps_back() {
    let (_d, store) = open();
    for (t, name) in [(100, "a"), (300, "b"), (200, "c"), (400, "d")] {
        let mut b = Batch::new(Micros(t));
        let n = node(name);
        b.record(n.clone(), [EventKind::Registered { node: Box::new(n) }]);
        store.write(b).unwrap();
    }
    store.flush_blocking().unwrap();
    let seqs = |since: Option<i64>, until: Option<i64>| {
        store
            .history(&HistoryQuery {
                since: since.map(Micros),
                until: until.map(Micros),
                ..Default::default()
            })
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect::<Vec<_>>()
    };
    // Event 3 was written at 200 after one at 300: it counts as 300.
    assert_eq!(seqs(Some(250), None), vec![2, 3, 4]);
    assert_eq!(seqs(None, Some(250)), vec![1]);
    assert_eq!(seqs(Some(300), Some(300)), vec![2, 3]);
    assert_eq!(seqs(Some(500), None), Vec::<u64>::new());
    assert_eq!(store.last_seq_at_or_before(Micros(99)).unwrap(), None);
    assert_eq!(store.first_seq_at_or_after(Micros(401)).unwrap(), None);
    assert!(store.verify().unwrap().problems.is_empty());
}

#[test]
fn a_page_looks_at_a_bounded_number_of_records() {
    let (_d, store) = open();
    flapping(&store, 5, 12_000, 1_000);
    // A filter that matches nothing still ends each page after a bounded scan.
    let query = HistoryQuery {
        condition: Some("DiskPressure".into()),
        ..Default::default()
    };
    let page = store.history_page(&query, 10).unwrap();
    assert!(page.events.is_empty());
    let next = page.next_after.expect("more to look at");
    assert!(next < 12_000, "{next}");
    // Pages resume where the last one stopped, and together give everything.
    let mut query = HistoryQuery::default();
    let mut seqs = Vec::new();
    loop {
        let page = store.history_page(&query, 999).unwrap();
        seqs.extend(page.events.iter().map(|e| e.seq));
        match page.next_after {
            Some(after) => query.after_seq = Some(after),
            None => break,
        }
    }
    assert_eq!(seqs, (1..=store.last_seq()).collect::<Vec<_>>());
}

#[test]
fn checkpoints_make_at_exact_and_bounded() {
    let (_d, store) = open_every(Some(1_000));
    flapping(&store, 40, 3_200, 100);
    let events = all(&store);
    let written = store
        .write_due_checkpoints(store.durable_seq(), u64::MAX)
        .unwrap();
    assert_eq!(written.len(), 3, "{written:?}");
    assert!(written.windows(2).all(|w| w[1].seq - w[0].seq == 1_000));
    for c in &written {
        assert_eq!(
            store.checkpoint_registry(c.seq).unwrap(),
            replayed_at(&events, c.seq)
        );
        assert_eq!(c.nodes as usize, replayed_at(&events, c.seq).len());
    }
    for seq in [0, 1, 39, 40, 999, 1_000, 1_001, 2_555, store.last_seq()] {
        let at = store.registry_at(seq).unwrap();
        assert_eq!(at.nodes, replayed_at(&events, seq), "at seq {seq}");
        assert!(seq - at.checkpoint < 1_000);
        for name in ["n000", "n013", "n039"] {
            assert_eq!(
                store.node_at(name, seq).unwrap(),
                replayed_at(&events, seq).remove(name),
                "{name} at seq {seq}"
            );
        }
    }
    // Nothing more is due until another interval has passed.
    assert!(store
        .write_due_checkpoints(store.durable_seq(), u64::MAX)
        .unwrap()
        .is_empty());
    assert!(
        store.verify().unwrap().problems.is_empty(),
        "{:?}",
        store.verify().unwrap()
    );
}

/// Runs retention steps until one says there is no more to do.
pub(super) fn step_until_done(
    store: &Store,
    config: &RetentionConfig,
    now: Micros,
) -> Vec<retention::StepReport> {
    let mut tail = TailBytes::default();
    let mut reports = Vec::new();
    for _ in 0..10_000 {
        let report = store.retention_step(config, now, &mut tail).unwrap();
        let more = report.more;
        reports.push(report);
        if !more {
            return reports;
        }
    }
    panic!("retention never finished");
}

/// Retention by age alone, everything older than `max_age` seconds at
/// `now`, run until it is done.
pub(super) fn prune_older_than(
    store: &Store,
    max_age: u64,
    now: Micros,
) -> Vec<retention::StepReport> {
    let config = RetentionConfig {
        max_age: Some(std::time::Duration::from_secs(max_age)),
        max_bytes: None,
    };
    step_until_done(store, &config, now)
}

#[test]
fn retention_by_age_prunes_to_a_checkpoint_and_keeps_at_exact() {
    let (_d, store) = open_every(Some(1_000));
    flapping(&store, 30, 4_500, 100);
    let events = all(&store);
    // Writes are a second per event apart: keep the last 1,200 seconds.
    let now = Micros(4_500 * 1_000_000);
    let reports = prune_older_than(&store, 1_200, now);
    // First to the periodic checkpoint before the cut-off, then (the events
    // after it cost more than a checkpoint) to one written at the cut-off.
    assert_eq!(reports[0].horizon, Some(3_000), "{reports:?}");
    let horizon = store.horizon();
    let cutoff = Micros(3_300 * 1_000_000);
    assert_eq!(horizon, last_before(&events, cutoff), "{reports:?}");
    assert!(store.checkpoint(horizon).unwrap().is_some());
    // Everything before the horizon is gone, every index entry with it.
    assert_eq!(
        store.events.iter().next().unwrap().unwrap().0.as_ref(),
        &(horizon + 1).to_be_bytes()
    );
    assert!(store
        .checkpoints
        .range(..horizon.to_be_bytes())
        .next()
        .is_none());
    assert_eq!(all(&store).first().unwrap().seq, horizon + 1);
    assert!(
        store.verify().unwrap().problems.is_empty(),
        "{:?}",
        store.verify().unwrap()
    );
    // The registry anywhere inside the horizon is exact.
    for seq in [horizon, horizon + 1, 4_123, store.last_seq()] {
        assert_eq!(
            store.registry_at(seq).unwrap().nodes,
            replayed_at(&events, seq)
        );
    }
    let horizon_time = store.checkpoint(horizon).unwrap().unwrap().time;
    assert_eq!(
        store.registry_at_time(horizon_time).unwrap().nodes,
        replayed_at(&events, horizon)
    );
    // Before it, `at` names the horizon.
    let err = store.registry_at_time(Micros(5_000_000)).unwrap_err();
    assert!(
        matches!(err, StoreError::BeforeHorizon(_, t, h) if t == horizon_time && h == horizon),
        "{err}"
    );
    assert!(err.to_string().contains(&format!("seq {horizon}")), "{err}");
    assert!(matches!(
        store.pin_history(10),
        Err(StoreError::Expired { horizon: h, .. }) if h == horizon
    ));
    // Reopening keeps the horizon and the seqs.
    let path = store.path().to_path_buf();
    let last = store.last_seq();
    drop(store);
    let store = super::tests::reopen(&path);
    assert_eq!((store.horizon(), store.last_seq()), (horizon, last));
}

#[test]
fn retention_writes_a_checkpoint_at_the_cutoff_when_none_is_near() {
    let (_d, store) = open();
    flapping(&store, 5, 3_000, 100);
    let events = all(&store);
    prune_older_than(&store, 1_000, Micros(3_000 * 1_000_000));
    let horizon = store.horizon();
    assert!(horizon > 1_000, "{horizon}");
    // Exactly the events older than the retention are gone.
    let cutoff = Micros(2_000 * 1_000_000);
    assert!(events
        .iter()
        .filter(|e| e.seq <= horizon)
        .all(|e| e.time <= cutoff));
    assert!(all(&store).iter().all(|e| e.time > cutoff));
    assert_eq!(
        store.registry_at(horizon).unwrap().nodes,
        replayed_at(&events, horizon)
    );
    assert!(store.verify().unwrap().problems.is_empty());
}

#[test]
fn retention_by_size_keeps_the_history_within_its_bytes() {
    let (_d, store) = open_every(Some(1_000));
    flapping(&store, 20, 5_200, 200);
    let mut tail = TailBytes::default();
    let unlimited = RetentionConfig {
        max_age: None,
        max_bytes: None,
    };
    store
        .retention_step(&unlimited, Micros::now(), &mut tail)
        .unwrap();
    let full = store.retention_status().unwrap().history_bytes;
    assert_eq!(store.horizon(), 0);
    let config = RetentionConfig {
        max_age: None,
        max_bytes: Some(full / 2),
    };
    step_until_done(&store, &config, Micros::now());
    let status = store.retention_status().unwrap();
    assert!(status.history_bytes <= full / 2, "{status:?} of {full}");
    assert!(store.horizon() >= 2_000, "{}", store.horizon());
    // What retention counts is what the trees hold (keys and values).
    let trees = store.status().unwrap().trees;
    let held: u64 = trees
        .iter()
        .filter(|t| {
            [
                trees::EVENTS,
                trees::NODE_EVENTS,
                trees::EVENT_TIMES,
                trees::CHECKPOINT_NODES,
            ]
            .contains(&t.name.as_str())
        })
        .map(|t| t.bytes)
        .sum();
    // All but the time index entries that start a write, or the history
    // kept: retention counts those of every stride of seqs.
    let uncounted = store
        .event_times
        .iter()
        .keys()
        .map(|k| {
            migrations::v4_history_index::parse_time_key(&k.unwrap())
                .unwrap()
                .1
        })
        .filter(|seq| !super::time_index::indexed(*seq, false))
        .count() as u64;
    assert!(uncounted > 0);
    assert_eq!(held, status.history_bytes + 16 * uncounted, "{trees:?}");
}

#[tokio::test(start_paused = true)]
async fn a_pinned_reader_keeps_its_history_until_its_pin_expires() {
    let (_d, store) = open_every(Some(1_000));
    flapping(&store, 10, 3_200, 200);
    store
        .write_due_checkpoints(store.durable_seq(), u64::MAX)
        .unwrap();
    // A reader in the middle of old history.
    let pin = store.pin_history(500).unwrap();
    let config = RetentionConfig {
        max_age: Some(std::time::Duration::from_secs(500)),
        max_bytes: None,
    };
    let now = Micros(3_200 * 1_000_000);
    step_until_done(&store, &config, now);
    let horizon = store.horizon();
    assert!(horizon >= 2_000, "{horizon}");
    // New readers start after the horizon; the pinned one still reads all it needs.
    assert!(store.pin_history(horizon - 1).is_err());
    let page = store
        .history_page(
            &HistoryQuery {
                after_seq: Some(500),
                ..Default::default()
            },
            100,
        )
        .unwrap();
    // (Reads start at the horizon; the pinned reader pages from its own
    // cursor, which the events it needs still back.)
    assert!(store.events.contains_key(501u64.to_be_bytes()).unwrap());
    assert_eq!(page.events.first().unwrap().seq, horizon + 1);
    store.check_kept(500).unwrap();
    // Once the pin is older than its time to live, pruning goes on, and the
    // reader learns its history is gone instead of reading holes.
    tokio::time::advance(retention::PIN_TTL).await;
    step_until_done(&store, &config, now);
    assert!(!store.events.contains_key(501u64.to_be_bytes()).unwrap());
    assert!(matches!(
        store.check_kept(500),
        Err(StoreError::Expired { .. })
    ));
    drop(pin);
    assert!(store.verify().unwrap().problems.is_empty());
}

#[test]
fn unknown_nodes_and_conditions_are_refused_deleted_ones_are_not() {
    let (_d, store) = open();
    flapping(&store, 3, 10, 5);
    let mut b = Batch::new(Micros(99));
    b.delete("n001", "gone");
    b.node_event(
        "lookup-only",
        EventKind::AddressLookupFailed {
            message: "nx".into(),
        },
    );
    let mut n = node("n002");
    n.conditions.push(crate::model::Condition {
        kind: "KernelDeadlock".into(),
        ..n.conditions[0].clone()
    });
    b.record(n, []);
    store.write(b).unwrap();
    store.flush_blocking().unwrap();
    let check = |node: Option<&str>, condition: Option<&str>| {
        store.check_query(&HistoryQuery {
            node: node.map(String::from),
            condition: condition.map(String::from),
            ..Default::default()
        })
    };
    check(Some("n001"), None).unwrap();
    check(Some("lookup-only"), None).unwrap();
    let err = check(Some("nobody"), None).unwrap_err();
    assert!(
        matches!(err, StoreError::UnknownNode(ref n) if n == "nobody"),
        "{err}"
    );
    check(None, Some("ready")).unwrap();
    check(None, Some("MemoryPressure")).unwrap();
    check(None, Some("KernelDeadlock")).unwrap();
    let err = check(None, Some("Readyy")).unwrap_err();
    assert!(err.to_string().contains("Readyy"), "{err}");
    assert!(
        err.to_string().contains("KernelDeadlock, MemoryPressure"),
        "{err}"
    );
}

#[test]
fn an_export_carries_every_tree_and_the_horizon() {
    let (_d, store) = open_every(Some(1_000));
    store.enable_outbox();
    flapping(&store, 10, 2_500, 100);
    let events = all(&store);
    store
        .put_leases(&[crate::model::Lease {
            name: "n001".into(),
            uid: "u".into(),
            created: Micros(1),
            generation: 3,
            holder_identity: Some("n001".into()),
            lease_duration_seconds: Some(40),
            acquire_time: None,
            renew_time: Some(Micros(2)),
            lease_transitions: None,
            owner_references: Vec::new(),
        }])
        .unwrap();
    let csinode = crate::model::NodeObject {
        node: "n001".into(),
        resource: "csinodes.storage.k8s.io".into(),
        name: "n001".into(),
        generation: 2,
        json: "{\"metadata\":{\"name\":\"n001\"}}".into(),
    };
    // And a mirror pod, keyed `namespace/name`.
    let pod = crate::model::NodeObject {
        node: "n001".into(),
        resource: "pods".into(),
        name: "kube-system/etcd-n001".into(),
        generation: 3,
        json: "{\"metadata\":{\"name\":\"etcd-n001\",\"namespace\":\"kube-system\"}}".into(),
    };
    store
        .write_node_objects(&[csinode.clone(), pod.clone()], &[])
        .unwrap();
    store.mark_started("instance-1").unwrap();
    store.mark_clean_stop(Micros(77)).unwrap();
    store
        .meta_put(b"mirror_last_error", b"{\"message\":\"refused\"}")
        .unwrap();
    store.meta_put(b"binary", &[0xff, 0x00]).unwrap();
    prune_older_than(&store, 1_000, Micros(2_500 * 1_000_000));
    let horizon = store.horizon();
    assert!(horizon > 1_000, "{horizon}");
    let mut exported = Vec::new();
    let summary = store.export(&mut exported).unwrap();
    assert_eq!(summary.events as u64, store.last_seq() - horizon);
    assert_eq!((summary.leases, summary.outbox), (1, store.outbox_len()));
    assert_eq!(summary.node_objects, 2);
    assert!(summary.outbox > 0);

    let (_d2, copy) = open_every(Some(1_000));
    let imported = copy.import(&mut exported.as_slice()).unwrap();
    assert_eq!(imported.horizon, horizon);
    assert_eq!(copy.horizon(), horizon);
    assert_eq!(copy.last_seq(), store.last_seq());
    assert_eq!(copy.nodes().unwrap(), store.nodes().unwrap());
    assert_eq!(copy.leases().unwrap(), store.leases().unwrap());
    assert_eq!(copy.node_objects().unwrap(), vec![csinode, pod]);
    assert_eq!(copy.outbox().unwrap(), store.outbox().unwrap());
    assert_eq!(copy.last_instance().unwrap().as_deref(), Some("instance-1"));
    assert_eq!(copy.last_clean_stop().unwrap(), Some(Micros(77)));
    assert_eq!(
        copy.meta_get(b"mirror_last_error").unwrap().unwrap(),
        b"{\"message\":\"refused\"}"
    );
    assert_eq!(copy.meta_get(b"binary").unwrap().unwrap(), vec![0xff, 0x00]);
    assert_eq!(all(&copy), all(&store));
    // The horizon's checkpoint came along (the periodic ones are rebuilt
    // from it, and verify checks each against the history).
    let base = |s: &Store| {
        let c = s.checkpoint(horizon).unwrap().unwrap();
        (c.seq, c.time, c.nodes, c.node_bytes)
    };
    assert_eq!(base(&copy), base(&store));
    assert_eq!(
        copy.checkpoint_registry(horizon).unwrap(),
        store.checkpoint_registry(horizon).unwrap()
    );
    for seq in [horizon, 2_222, copy.last_seq()] {
        assert_eq!(
            copy.registry_at(seq).unwrap().nodes,
            replayed_at(&events, seq)
        );
    }
    assert!(
        copy.verify().unwrap().problems.is_empty(),
        "{:?}",
        copy.verify().unwrap()
    );
    // Its time index is the original's.
    let at = Micros(2_345 * 1_000_000);
    assert_eq!(
        copy.last_seq_at_or_before(at).unwrap(),
        store.last_seq_at_or_before(at).unwrap()
    );
}

#[test]
fn a_format_1_export_still_imports_and_a_cut_one_is_refused() {
    let v1 = concat!(
        r#"{"format":"nodekeeper-export","version":1,"exportedAt":"2026-11-30T09:00:00Z","lastSeq":3,"nodes":1,"events":2}"#,
        "\n",
        r#"{"node":{"name":"edge-1","uid":"u1","creationTimestamp":"2026-11-30T09:00:00Z","resourceVersion":2,"source":"static","labels":{},"externalID":"edge-1","providerID":"","capacity":{"cpuMillis":1000,"memoryBytes":1024},"unschedulable":false,"taints":[],"addresses":[],"conditions":[]}}"#,
        "\n",
        r#"{"event":{"seq":2,"time":"2026-11-30T09:00:00Z","node":"edge-1","kind":"Registered","record":{"name":"edge-1","uid":"u1","creationTimestamp":"2026-11-30T09:00:00Z","resourceVersion":0,"source":"static","labels":{},"externalID":"edge-1","providerID":"","capacity":{"cpuMillis":1000,"memoryBytes":1024},"unschedulable":false,"taints":[],"addresses":[],"conditions":[]}}}"#,
        "\n",
        r#"{"event":{"seq":3,"time":"2026-11-30T09:00:01Z","node":null,"kind":"ControllerStopped","instance":"old"}}"#,
        "\n",
    );
    let (_d, store) = open();
    let imported = store.import(&mut v1.as_bytes()).unwrap();
    assert_eq!((imported.counts.nodes, imported.counts.events), (1, 2));
    // Its log starts at seq 2: the history is kept from seq 1 on.
    assert_eq!(store.horizon(), 1);
    assert_eq!(store.last_seq(), 3);
    assert!(
        store.verify().unwrap().problems.is_empty(),
        "{:?}",
        store.verify().unwrap()
    );
    assert_eq!(store.registry_at(3).unwrap().nodes.len(), 1);

    // An export cut short (no end line) is refused, and leaves nothing.
    let (_d, full) = open();
    flapping(&full, 3, 20, 5);
    let mut exported = Vec::new();
    full.export(&mut exported).unwrap();
    let text = String::from_utf8(exported).unwrap();
    let cut: String = text.lines().take(8).map(|l| format!("{l}\n")).collect();
    let (_d, copy) = open();
    let err = copy.import(&mut cut.as_bytes()).unwrap_err();
    assert!(err.to_string().contains("incomplete"), "{err}");
    assert!(copy.nodes().unwrap().is_empty() && all(&copy).is_empty());
    // A v1 export whose counts do not add up is refused the same way.
    let short_v1: String = v1.lines().take(3).map(|l| format!("{l}\n")).collect();
    let (_d, copy) = open();
    let err = copy.import(&mut short_v1.as_bytes()).unwrap_err();
    assert!(err.to_string().contains("incomplete"), "{err}");
}

#[test]
fn an_import_interrupted_leaves_a_store_every_open_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    {
        let store = Store::open(&path, &StoreOptions::default()).unwrap();
        // What an import does first, before any record: the marker, durable.
        store
            .meta
            .insert(META_IMPORT_INCOMPLETE, &b"an import started at T"[..])
            .unwrap();
        store.db.flush().unwrap();
    }
    let err = loop {
        match Store::open(&path, &StoreOptions::default()) {
            Err(StoreError::Locked { .. }) => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            Err(e) => break e,
            Ok(_) => panic!("an incomplete import was opened"),
        }
    };
    assert!(matches!(err, StoreError::ImportIncomplete { .. }), "{err}");
    assert!(err.to_string().contains("db import"), "{err}");
}

#[test]
fn an_import_names_the_line_of_outbox_work_or_a_checkpoint_node_it_refuses() {
    let (_d, full) = open();
    flapping(&full, 2, 4, 2);
    let mut exported = Vec::new();
    full.export(&mut exported).unwrap();
    let text = String::from_utf8(exported).unwrap();
    let header = text.lines().next().unwrap();
    let node = text.lines().find(|l| l.starts_with(r#"{"node":"#)).unwrap();
    let refused = |second: &str| {
        let input = format!("{header}\n\n{second}\n");
        let (_d, copy) = open();
        let err = copy.import(&mut input.as_bytes()).unwrap_err();
        assert!(copy.nodes().unwrap().is_empty() && all(&copy).is_empty());
        match err {
            StoreError::Import { line, reason } => (line, reason),
            other => panic!("{other}"),
        }
    };
    let (line, reason) = refused(
        r#"{"outbox":{"kind":"Pods","node":"edge-1","seq":1,"enqueued":"2026-11-30T09:00:00Z"}}"#,
    );
    assert_eq!(line, 3);
    assert!(
        reason.contains(r#"outbox work of kind "Pods" is not one this build knows"#),
        "{reason}"
    );
    let checkpoint_node = node.replacen(r#"{"node":"#, r#"{"checkpointNode":"#, 1);
    let (line, reason) = refused(&checkpoint_node);
    assert_eq!(line, 3);
    assert_eq!(
        reason,
        "a checkpointNode line in an export without a horizon"
    );
}

/// `db export --format-version 2` writes what a schema-6 release reads:
/// every line format 3 has, but no API objects, no `CertificateIssued`
/// events, no Leases' owners and no nodes' `reported` (images, the
/// kubelet's port, …), which format 3 keeps; the result imports, and holds
/// everything else.
#[test]
fn a_format_2_export_leaves_out_what_schema_6_cannot_read() {
    let (_d, store) = open();
    let n = node("n001");
    let mut b = Batch::new(Micros(1));
    b.record(
        n.clone(),
        [EventKind::Registered {
            node: Box::new(n.clone()),
        }],
    );
    store.write(b).unwrap();
    let mut b = Batch::new(Micros(2));
    b.record(
        n.clone(),
        [EventKind::CertificateIssued {
            csr: "csr-1".into(),
            serial: "01".into(),
            not_after: Micros(9),
            requested_by: "system:bootstrap:abcdef".into(),
            approval: "AutoApproved".into(),
        }],
    );
    store.write(b).unwrap();
    // What a kubelet reports beyond conditions: format 3 only.
    let mut reporting = n.clone();
    reporting.reported.images = vec![crate::model::Image {
        names: vec!["registry.k8s.io/pause:3.10".into()],
        size_bytes: Some(320_368),
    }];
    reporting.reported.kubelet_port = 10250;
    let mut b = Batch::new(Micros(3));
    b.record(reporting, [ready(ConditionStatus::True)]);
    store.write(b).unwrap();
    store
        .put_leases(&[crate::model::Lease {
            name: "n001".into(),
            uid: "u".into(),
            created: Micros(1),
            generation: 1,
            holder_identity: Some("n001".into()),
            lease_duration_seconds: Some(40),
            acquire_time: None,
            renew_time: Some(Micros(2)),
            lease_transitions: None,
            owner_references: vec![crate::model::OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: "n001".into(),
                uid: "node-uid".into(),
                controller: None,
                block_owner_deletion: None,
            }],
        }])
        .unwrap();
    store
        .put_api_object(
            ApiObject {
                resource: "secrets".into(),
                namespace: "kube-system".into(),
                name: "bootstrap-token-abcdef".into(),
                version: 0,
                json: "{}".into(),
            },
            None,
        )
        .unwrap();
    store.flush_blocking().unwrap();

    let mut v3 = Vec::new();
    let all = store.export(&mut v3).unwrap();
    assert_eq!((all.events, all.api_objects), (3, 1));
    let text = String::from_utf8(v3.clone()).unwrap();
    assert!(text.contains("\"version\":3") && text.contains("ownerReferences"));
    assert!(text.contains("\"kubeletPort\":10250"), "{text}");
    let (_d3, whole) = open();
    whole.import(&mut v3.as_slice()).unwrap();
    assert_eq!(whole.nodes().unwrap(), store.nodes().unwrap());
    assert_eq!(whole.nodes().unwrap()[0].reported.kubelet_port, 10250);

    let mut v2 = Vec::new();
    let (written, left_out) = store.export_format(&mut v2, 2).unwrap();
    assert_eq!(
        (written.events, written.api_objects, written.leases),
        (2, 0, 1)
    );
    assert_eq!((left_out.events, left_out.api_objects), (1, 1));
    let text = String::from_utf8(v2.clone()).unwrap();
    assert!(
        text.starts_with("{\"format\":\"nodekeeper-export\",\"version\":2,"),
        "{text}"
    );
    for absent in [
        "{\"apiObject\":",
        "CertificateIssued",
        "ownerReferences",
        "\"reported\"",
        "pause:3.10",
    ] {
        assert!(!text.contains(absent), "{absent} in {text}");
    }
    let (_d2, copy) = open();
    let imported = copy.import(&mut v2.as_slice()).unwrap();
    assert_eq!((imported.counts.nodes, imported.counts.events), (1, 2));
    assert_eq!(copy.last_seq(), store.last_seq());
    assert!(copy.nodes().unwrap()[0].reported.is_empty());
}

#[test]
fn an_export_format_this_release_does_not_write_is_refused_before_a_byte() {
    let (_dir, store) = open();
    for version in [0, crate::store::EXPORT_FORMAT_VERSION + 1] {
        let mut out = Vec::new();
        let err = store.export_format(&mut out, version).unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("there is no export format {version}")),
            "{err}"
        );
        assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
    }
}
