//! Store tests for the per-node index in runs: a node's events read one by
//! one from runs (pages that start inside one), older stores' entry per
//! event, retention at a horizon inside a run, and `db verify`.
// Synchronous tests of a synchronous store: real time is right here.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use migrations::v2_node_index::index_key;

use super::tests_history::prune_older_than;
use super::*;
use crate::store::records::tests::sample_node;

fn open_at(path: &Path) -> Store {
    Store::open(path, &StoreOptions::default()).unwrap()
}

fn kept_ready(n: usize) -> Vec<EventKind> {
    (0..n)
        .map(|i| EventKind::ProbeKeptReady {
            message: format!("m{i}"),
        })
        .collect()
}

/// A batch at `time`: `node` registered when `register`, then `more`
/// events about it that change nothing.
fn batch(time: i64, node: &str, register: bool, more: usize) -> Batch {
    let mut b = Batch::new(Micros(time));
    if register {
        let mut n = sample_node();
        n.name = node.into();
        b.record(n.clone(), [EventKind::Registered { node: Box::new(n) }]);
    }
    for kind in kept_ready(more) {
        b.events.push((Some(node.into()), kind));
    }
    b
}

/// Every entry of the node index: node, first seq, run length.
fn runs(store: &Store) -> Vec<(String, u64, u64)> {
    store
        .node_events
        .iter()
        .map(|e| {
            let (k, v) = e.unwrap();
            let (seq, len) = node_index::parse_run(&k, &v).unwrap();
            let node = String::from_utf8(k[..k.len() - 9].to_vec()).unwrap();
            (node, seq, len)
        })
        .collect()
}

fn node_history(store: &Store, node: &str) -> Vec<u64> {
    let query = HistoryQuery {
        node: Some(node.into()),
        ..HistoryQuery::default()
    };
    store
        .history(&query)
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect()
}

/// The node's history read a page of `max` at a time.
fn node_pages(store: &Store, node: &str, max: usize) -> Vec<u64> {
    let mut query = HistoryQuery {
        node: Some(node.into()),
        ..HistoryQuery::default()
    };
    let mut seqs = Vec::new();
    loop {
        let page = store.history_page(&query, max).unwrap();
        assert!(page.events.len() <= max);
        seqs.extend(page.events.iter().map(|e| e.seq));
        match page.next_after {
            Some(after) => query.after_seq = Some(after),
            None => return seqs,
        }
    }
}

/// Node a: seqs 1-3 (registered, two more), 5-7 and, in a second write, 8-9;
/// node b: seq 4 between them.
fn write_two_nodes(store: &Store) {
    store
        .write_all(vec![
            batch(1_000, "a", true, 2),
            batch(1_000, "b", true, 0),
            batch(2_000, "a", false, 3),
        ])
        .unwrap();
    store.write(batch(3_000, "a", false, 2)).unwrap();
    store.flush_blocking().unwrap();
}

#[test]
fn a_nodes_events_in_runs_read_one_by_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_at(&dir.path().join("db"));
    write_two_nodes(&store);
    let one = |n: &str, seq, len| (n.to_string(), seq, len);
    assert_eq!(
        runs(&store),
        vec![
            one("a", 1, 3),
            one("a", 5, 3),
            one("a", 8, 2),
            one("b", 4, 1)
        ]
    );
    let a = vec![1, 2, 3, 5, 6, 7, 8, 9];
    assert_eq!(node_history(&store, "a"), a);
    assert_eq!(node_history(&store, "b"), vec![4]);
    for max in 1..=3 {
        assert_eq!(node_pages(&store, "a", max), a, "pages of {max}");
    }
    // A page that starts inside a run, and one that ends inside one.
    let query = HistoryQuery {
        node: Some("a".into()),
        after_seq: Some(5),
        limit: Some(1),
        ..HistoryQuery::default()
    };
    assert_eq!(store.history(&query).unwrap()[0].seq, 6);
    let until = HistoryQuery {
        node: Some("a".into()),
        since: Some(Micros(2_000)),
        until: Some(Micros(2_000)),
        ..HistoryQuery::default()
    };
    let got: Vec<u64> = store
        .history(&until)
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(got, vec![5, 6, 7]);
    assert_eq!(store.node_at("a", 2).unwrap().unwrap().name, "a");
    assert!(store.node_is_known("a").unwrap());
    assert!(store.verify().unwrap().problems.is_empty());
}

#[test]
fn an_entry_for_every_event_as_older_stores_have_reads_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_at(&dir.path().join("db"));
    write_two_nodes(&store);
    store.node_events.clear().unwrap();
    for e in store.history(&HistoryQuery::default()).unwrap() {
        let node = e.node.unwrap();
        store
            .node_events
            .insert(index_key(&node, e.seq), &[] as &[u8])
            .unwrap();
    }
    assert_eq!(runs(&store).len(), 9);
    assert_eq!(node_history(&store, "a"), vec![1, 2, 3, 5, 6, 7, 8, 9]);
    assert_eq!(node_pages(&store, "a", 2), vec![1, 2, 3, 5, 6, 7, 8, 9]);
    assert!(store.verify().unwrap().problems.is_empty());
}

#[test]
fn retention_at_a_horizon_inside_a_run_keeps_the_rest_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_at(&dir.path().join("db"));
    // One write: node a's 300 events, 15 a second, one run.
    let batches = (1..=20)
        .map(|i| batch(i * 1_000_000, "a", i == 1, if i == 1 { 14 } else { 15 }))
        .collect();
    store.write_all(batches).unwrap();
    store.write(batch(30_000_000, "a", false, 5)).unwrap();
    store.flush_blocking().unwrap();
    assert_eq!(
        runs(&store),
        vec![("a".to_string(), 1, 300), ("a".to_string(), 301, 5)]
    );
    prune_older_than(&store, 10, Micros(20_000_000));
    assert_eq!(store.horizon(), 150);
    // The run's rest is keyed by the first event kept.
    assert_eq!(
        runs(&store),
        vec![("a".to_string(), 151, 150), ("a".to_string(), 301, 5)]
    );
    assert_eq!(node_history(&store, "a"), (151..=305).collect::<Vec<_>>());
    assert_eq!(node_pages(&store, "a", 7), (151..=305).collect::<Vec<_>>());
    assert_eq!(store.node_at("a", 160).unwrap().unwrap().name, "a");
    assert!(store.node_is_known("a").unwrap());
    assert!(store.verify().unwrap().problems.is_empty());
}

#[test]
fn verify_finds_a_node_index_that_disagrees_with_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_at(&dir.path().join("db"));
    write_two_nodes(&store);
    let problems = |store: &Store| store.verify().unwrap().problems;

    // A run longer than the events it stands for.
    store
        .node_events
        .insert(index_key("a", 8), node_index::run_value(4))
        .unwrap();
    let found = problems(&store);
    assert!(
        found
            .iter()
            .any(|p| p == "the node index points at event 10, which does not exist"),
        "{found:?}"
    );
    store
        .node_events
        .insert(index_key("a", 8), node_index::run_value(2))
        .unwrap();

    // A run gone.
    store.node_events.remove(index_key("a", 5)).unwrap();
    let found = problems(&store);
    assert!(
        found
            .iter()
            .any(|p| p == "event 6 is missing from the index of node a"),
        "{found:?}"
    );
    store
        .node_events
        .insert(index_key("a", 5), node_index::run_value(3))
        .unwrap();

    // A run length that is not one.
    store
        .node_events
        .insert(index_key("a", 5), &[0u8, 3][..])
        .unwrap();
    let found = problems(&store);
    assert!(
        found.iter().any(|p| p.contains("a run length of 2 bytes")),
        "{found:?}"
    );
}
