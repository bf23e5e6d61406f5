//! Store tests: transactions, history queries, durability bookkeeping, export/import.
// Synchronous tests of a synchronous store: real time and blocking waits are right here.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use super::*;
use crate::model::{ConditionStatus, EventKind};
use crate::store::records::tests::sample_node;

fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("db"), &StoreOptions::default()).unwrap();
    (dir, store)
}

fn node(name: &str) -> Node {
    let mut n = sample_node();
    n.name = name.into();
    n.conditions[0].last_transition = Micros(100);
    n
}

/// Opens a store another `Store` in this process just dropped (a restart
/// is a new process in practice; here sled's threads may still hold the lock).
pub(crate) fn reopen(path: &std::path::Path) -> Store {
    super::open_when_released(path, &StoreOptions::default()).unwrap()
}

fn register(store: &Store, name: &str) -> Vec<Event> {
    let mut b = Batch::new(Micros(100));
    let n = node(name);
    b.record(n.clone(), [EventKind::Registered { node: Box::new(n) }]);
    store.write(b).unwrap().events
}

fn ready_change(to: ConditionStatus) -> EventKind {
    EventKind::ConditionChanged {
        condition: "Ready".into(),
        from: Some(ConditionStatus::True),
        to,
        reason: "r".into(),
        message: "m".into(),
    }
}

#[test]
fn a_batch_gets_consecutive_seqs_and_sets_resource_versions() {
    let (_d, store) = open();
    let events = register(&store, "a");
    assert_eq!(events[0].seq, 1);
    let mut b = Batch::new(Micros(200));
    b.record(
        node("b"),
        [
            EventKind::Registered {
                node: Box::new(node("b")),
            },
            ready_change(ConditionStatus::False),
        ],
    );
    let events = store.write(b).unwrap().events;
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![2, 3]);
    assert_eq!(store.node("b").unwrap().unwrap().resource_version, 3);
    assert_eq!(store.last_seq(), 3);
}

#[test]
fn batches_written_together_are_as_if_written_one_after_another() {
    let (_d, store) = open();
    register(&store, "a");
    register(&store, "b");
    let change = |name: &str, time: i64, to| {
        let mut b = Batch::new(Micros(time));
        b.record(node(name), [ready_change(to)]);
        b
    };
    let written = store
        .write_all(vec![
            change("a", 300, ConditionStatus::False),
            Batch::new(Micros(999)),
            change("b", 250, ConditionStatus::Unknown),
            change("a", 400, ConditionStatus::True),
        ])
        .unwrap();
    assert_eq!(written.len(), 4);
    let seqs = |w: &Written| w.events.iter().map(|e| e.seq).collect::<Vec<_>>();
    assert_eq!(seqs(&written[0]), vec![3]);
    assert!(written[1].events.is_empty() && written[1].nodes.is_empty());
    assert_eq!(seqs(&written[2]), vec![4]);
    assert_eq!(seqs(&written[3]), vec![5]);
    // Each batch keeps its own time and sets its own nodes' versions.
    assert_eq!(written[2].events[0].time, Micros(250));
    assert_eq!(written[0].nodes[0].resource_version, 3);
    assert_eq!(written[3].nodes[0].resource_version, 5);
    assert_eq!(store.node("a").unwrap().unwrap().resource_version, 5);
    assert_eq!(store.node("b").unwrap().unwrap().resource_version, 4);
    assert_eq!(store.last_seq(), 5);
    store.flush_blocking().unwrap();
    let history: Vec<u64> = store
        .history(&HistoryQuery::default())
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(history, vec![1, 2, 3, 4, 5]);
    // The next single write follows on.
    assert_eq!(register(&store, "c")[0].seq, 6);
}

#[test]
fn history_shows_only_what_was_flushed() {
    let (_d, store) = open();
    register(&store, "a");
    assert!(store.history(&HistoryQuery::default()).unwrap().is_empty());
    store.flush_blocking().unwrap();
    assert_eq!(store.history(&HistoryQuery::default()).unwrap().len(), 1);
}

#[test]
fn history_filters_by_node_time_condition_and_seq() {
    let (_d, store) = open();
    register(&store, "a");
    register(&store, "b");
    let mut b = Batch::new(Micros(300));
    b.record(node("a"), [ready_change(ConditionStatus::Unknown)]);
    b.controller_event(EventKind::ControllerStopped {
        instance: "i".into(),
    });
    store.write(b).unwrap();
    store.flush_blocking().unwrap();
    let q = |q: HistoryQuery| {
        store
            .history(&q)
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect::<Vec<_>>()
    };
    assert_eq!(q(HistoryQuery::default()), vec![1, 2, 3, 4]);
    assert_eq!(
        q(HistoryQuery {
            node: Some("a".into()),
            ..Default::default()
        }),
        vec![1, 3]
    );
    assert_eq!(
        q(HistoryQuery {
            node: Some("b".into()),
            ..Default::default()
        }),
        vec![2]
    );
    assert_eq!(
        q(HistoryQuery {
            since: Some(Micros(200)),
            ..Default::default()
        }),
        vec![3, 4]
    );
    assert_eq!(
        q(HistoryQuery {
            until: Some(Micros(100)),
            ..Default::default()
        }),
        vec![1, 2]
    );
    assert_eq!(
        q(HistoryQuery {
            condition: Some("ready".into()),
            ..Default::default()
        }),
        vec![3]
    );
    assert_eq!(
        q(HistoryQuery {
            after_seq: Some(2),
            limit: Some(1),
            ..Default::default()
        }),
        vec![3]
    );
    // A node name that is a prefix of another must not see the other's events.
    register(&store, "a2");
    store.flush_blocking().unwrap();
    assert_eq!(
        q(HistoryQuery {
            node: Some("a".into()),
            ..Default::default()
        }),
        vec![1, 3]
    );
}

#[test]
fn deleting_keeps_history() {
    let (_d, store) = open();
    register(&store, "a");
    let mut b = Batch::new(Micros(200));
    b.delete("a", "removed from the source");
    store.write(b).unwrap();
    store.flush_blocking().unwrap();
    assert!(store.node("a").unwrap().is_none());
    let kinds: Vec<_> = store
        .history(&HistoryQuery {
            node: Some("a".into()),
            ..Default::default()
        })
        .unwrap()
        .iter()
        .map(|e| e.kind.name())
        .collect();
    assert_eq!(kinds, vec!["Registered", "Deleted"]);
}

#[test]
fn reopening_recovers_seq_and_durability() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    {
        let store = Store::open(&path, &StoreOptions::default()).unwrap();
        register(&store, "a");
        register(&store, "b");
        store.flush_blocking().unwrap();
    }
    let store = reopen(&path);
    assert_eq!(store.last_seq(), 2);
    assert_eq!(store.durable_seq(), 2);
    assert_eq!(register(&store, "c")[0].seq, 3);
}

#[test]
fn a_second_open_is_refused_as_locked() {
    let (dir, _store) = open();
    let err = Store::open(&dir.path().join("db"), &StoreOptions::default())
        .err()
        .unwrap();
    assert!(matches!(err, StoreError::Locked { .. }), "{err}");
    assert!(
        err.to_string().contains("in use by another nodekeeper"),
        "{err}"
    );
}

#[test]
fn verify_finds_a_registry_that_disagrees_with_history() {
    let (_d, store) = open();
    register(&store, "a");
    store.flush_blocking().unwrap();
    assert!(
        store.verify().unwrap().problems.is_empty(),
        "{:?}",
        store.verify().unwrap()
    );
    // A record changed behind the history's back.
    let mut n = store.node("a").unwrap().unwrap();
    n.conditions[0].status = ConditionStatus::False;
    store.put_quietly(&[n]).unwrap();
    let report = store.verify().unwrap();
    assert_eq!(report.problems.len(), 1, "{report:?}");
    assert!(
        report.problems[0].contains("history says True"),
        "{report:?}"
    );
}

#[test]
fn export_then_import_reproduces_registry_and_history() {
    let (_d, store) = open();
    register(&store, "a");
    register(&store, "b");
    let mut b = Batch::new(Micros(300));
    let mut a = store.node("a").unwrap().unwrap();
    a.conditions[0].status = ConditionStatus::Unknown;
    a.conditions[0].last_transition = Micros(300);
    b.record(a, [ready_change(ConditionStatus::Unknown)]);
    b.delete("b", "gone");
    store.write(b).unwrap();
    store.flush_blocking().unwrap();
    let mut exported = Vec::new();
    let summary = store.export(&mut exported).unwrap();
    assert_eq!((summary.nodes, summary.events), (1, 4));

    let (_d2, copy) = open();
    let imported = copy.import(&mut exported.as_slice()).unwrap();
    assert_eq!(imported.last_seq, 4);
    assert_eq!(copy.nodes().unwrap(), store.nodes().unwrap());
    let all = HistoryQuery::default();
    assert_eq!(copy.history(&all).unwrap(), store.history(&all).unwrap());
    let a = HistoryQuery {
        node: Some("a".into()),
        ..Default::default()
    };
    assert_eq!(copy.history(&a).unwrap(), store.history(&a).unwrap());
    assert!(copy.verify().unwrap().problems.is_empty());
    // A second import would mix two histories: refused, nothing lost.
    let err = copy.import(&mut exported.as_slice()).unwrap_err();
    assert!(matches!(err, StoreError::NotEmpty(_)), "{err}");
    assert_eq!(copy.nodes().unwrap().len(), 1);
}

#[test]
fn a_broken_import_names_the_line_and_leaves_the_store_empty() {
    let (_d, store) = open();
    register(&store, "a");
    store.flush_blocking().unwrap();
    let mut exported = Vec::new();
    store.export(&mut exported).unwrap();
    // Header, meta, the node, its event: a bad record before the end line.
    let text = String::from_utf8(exported).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(4, "{\"event\": 42}");
    let text = lines.join("\n") + "\n";
    let (_d2, copy) = open();
    let err = copy.import(&mut text.as_bytes()).unwrap_err();
    assert!(matches!(err, StoreError::Import { line: 5, .. }), "{err}");
    assert!(copy.nodes().unwrap().is_empty());
    assert_eq!(copy.last_seq(), 0);
    let err = copy.import(&mut "hello\n".as_bytes()).unwrap_err();
    assert!(err.to_string().contains("line 1"), "{err}");
}

/// An export of two registered nodes, its lines.
fn export_lines() -> Vec<String> {
    let (_d, store) = open();
    register(&store, "a");
    register(&store, "b");
    store.flush_blocking().unwrap();
    let mut exported = Vec::new();
    store.export(&mut exported).unwrap();
    String::from_utf8(exported)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// `lines` with the first line holding `key` changed by `change`.
fn changed(lines: &[String], key: &str, change: impl Fn(&mut serde_json::Value)) -> String {
    let mut done = false;
    let mut text = String::new();
    for line in lines {
        let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
        if !done && v.get(key).is_some() {
            change(&mut v);
            done = true;
        }
        text += &(v.to_string() + "\n");
    }
    text
}

#[test]
fn an_import_that_leaves_no_seq_to_write_is_refused() {
    let lines = export_lines();
    // Header, meta, the two nodes, their events, the end line.
    for (text, line) in [
        (
            changed(&lines, "format", |h| h["lastSeq"] = u64::MAX.into()),
            1,
        ),
        (
            changed(
                &lines,
                "format",
                |h| {
                    h["horizon"] =
                        serde_json::json!({"seq": MAX_SEQ + 1, "time": "2026-01-01T00:00:00Z"})
                },
            ),
            1,
        ),
        (
            changed(&lines, "event", |e| {
                e["event"]["seq"] = (MAX_SEQ + 1).into()
            }),
            5,
        ),
    ] {
        let (_d, copy) = open();
        let err = copy.import(&mut text.as_bytes()).unwrap_err();
        let StoreError::Import { line: at, reason } = &err else {
            panic!("{err}");
        };
        assert_eq!(*at, line, "{err}");
        assert!(
            reason.contains("past 9007199254740991, the last seq a store can write"),
            "{err}"
        );
        assert!(copy.nodes().unwrap().is_empty());
        assert_eq!(copy.last_seq(), 0);
    }
    // At the last seq there can be, it imports; the next write is refused.
    let (_d, copy) = open();
    let text = changed(&lines, "format", |h| h["lastSeq"] = MAX_SEQ.into());
    assert_eq!(copy.import(&mut text.as_bytes()).unwrap().last_seq, MAX_SEQ);
    let before = copy.history(&HistoryQuery::default()).unwrap();
    let mut b = Batch::new(Micros(500));
    b.record(
        node("c"),
        [EventKind::Registered {
            node: Box::new(node("c")),
        }],
    );
    let err = copy.write(b).unwrap_err();
    assert!(
        matches!(err, StoreError::SeqExhausted { last: MAX_SEQ, .. }),
        "{err}"
    );
    assert_eq!(copy.history(&HistoryQuery::default()).unwrap(), before);
    assert!(copy.node("c").unwrap().is_none());
}

#[test]
fn changes_queue_mirror_work_only_when_mirroring() {
    let (_d, store) = open();
    register(&store, "quiet");
    assert_eq!(store.outbox_len(), 0, "no mirror, no outbox");
    store.enable_outbox();
    register(&store, "a");
    let mut b = Batch::new(Micros(500));
    b.record(node("a"), [ready_change(ConditionStatus::False)]);
    b.node_event(
        "a",
        EventKind::EvictionStarted {
            reason: "gone".into(),
            mode: crate::model::EvictionMode::DeletePods,
        },
    );
    b.node_event(
        "a",
        EventKind::ProbeKeptReady {
            message: "m".into(),
        },
    );
    let written = store.write(b).unwrap();
    let queued = store.outbox().unwrap();
    assert_eq!(
        queued,
        vec![
            (
                OutboxKey::Node("a".into()),
                // Coalesced: the newest change, first queued at registration.
                OutboxEntry {
                    seq: written.events[0].seq,
                    enqueued: Micros(100),
                    reason: None
                }
            ),
            (
                OutboxKey::EvictPods("a".into()),
                OutboxEntry {
                    seq: written.events[1].seq,
                    enqueued: Micros(500),
                    reason: Some("gone".into())
                }
            ),
        ]
    );
}

#[test]
fn finished_work_leaves_the_outbox_unless_something_newer_was_queued() {
    let (_d, store) = open();
    store.enable_outbox();
    let seq = register(&store, "a")[0].seq;
    let key = OutboxKey::Node("a".into());
    // A change lands while the mirror is sending seq: the entry stays.
    let mut b = Batch::new(Micros(200));
    b.record(node("a"), [ready_change(ConditionStatus::Unknown)]);
    let newer = store.write(b).unwrap().events[0].seq;
    assert!(!store.outbox_done(&key, seq).unwrap());
    assert_eq!(store.outbox_entry(&key).unwrap().unwrap().seq, newer);
    assert!(store.outbox_done(&key, newer).unwrap());
    assert_eq!(store.outbox_len(), 0);
    assert!(!store.outbox_done(&key, newer).unwrap(), "already gone");
}

#[test]
fn a_resync_queues_only_what_is_not_queued_and_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    {
        let store = Store::open(&path, &StoreOptions::default()).unwrap();
        store.enable_outbox();
        register(&store, "a");
        let keys = [OutboxKey::Node("a".into()), OutboxKey::Node("b".into())];
        assert_eq!(store.enqueue(&keys, Micros(900)).unwrap(), 1);
        store.flush_blocking().unwrap();
    }
    let store = reopen(&path);
    let queued: Vec<_> = store
        .outbox()
        .unwrap()
        .into_iter()
        .map(|(k, e)| (k, e.enqueued))
        .collect();
    assert_eq!(
        queued,
        vec![
            (OutboxKey::Node("a".into()), Micros(100)),
            (OutboxKey::Node("b".into()), Micros(900))
        ]
    );
}

#[test]
fn verify_reads_the_outbox_too() {
    let (_d, store) = open();
    store.enable_outbox();
    register(&store, "a");
    assert_eq!(store.verify().unwrap().problems, Vec::<String>::new());
    store.outbox.insert([9u8, b'x'], &[1u8, 2, 3][..]).unwrap();
    let problems = store.verify().unwrap().problems;
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("outbox key"), "{problems:?}");
}

/// `db status -o json` and the API's status answer keep their field names.
#[test]
fn status_json_keeps_its_field_names() {
    let (_dir, store) = open();
    let json = serde_json::to_value(store.status().unwrap()).unwrap();
    let mut keys: Vec<&str> = json
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "checkpoints",
            "events",
            "firstEvent",
            "horizon",
            "lastCleanStop",
            "lastEvent",
            "lastInstance",
            "lastSeq",
            "nodes",
            "outboxEntries",
            "path",
            "retention",
            "schemaVersion",
            "sizeOnDiskBytes",
            "trees",
        ]
    );
}
