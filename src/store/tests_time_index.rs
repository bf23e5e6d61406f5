//! Store tests for the sparse time index: times placed exactly between its
//! entries and at the edges of writes, older stores' dense index, a
//! restart, retention at a horizon inside a write, and `db verify`.
// Synchronous tests of a synchronous store: real time is right here.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use migrations::v4_history_index::{parse_time_key, time_key};

use super::tests_history::prune_older_than;
use super::time_index::STRIDE;
use super::*;
use crate::store::records::tests::sample_node;

fn open_at(path: &Path) -> Store {
    Store::open(path, &StoreOptions::default()).unwrap()
}

/// One write of `batches`, each (its time, how many nodes it registers).
fn write(store: &Store, batches: &[(i64, usize)]) {
    let batches = batches
        .iter()
        .map(|&(time, count)| {
            let mut b = Batch::new(Micros(time));
            for _ in 0..count {
                let mut n = sample_node();
                n.name = format!("n{}", store.last_seq() as usize + b.events.len() + 1);
                b.record(n.clone(), [EventKind::Registered { node: Box::new(n) }]);
            }
            b
        })
        .collect();
    store.write_all(batches).unwrap();
}

/// Writes of every shape: one event, a few, more than a stride; batches of
/// equal times, times that step back, a write that starts before the last.
fn write_varied(store: &Store) {
    write(store, &[(1_000, 1)]);
    write(store, &[(2_000, 3), (2_000, 2), (3_000, 1)]);
    write(store, &[(2_500, 70)]);
    write(store, &[(4_000, 40), (3_500, 30), (5_000, 90), (6_000, 1)]);
    write(store, &[(6_000, 2)]);
    write(store, &[(7_000, 130)]);
    write(store, &[(9_000, 5), (8_000, 5), (10_000, 64)]);
    store.flush_blocking().unwrap();
}

/// Every kept event's seq and effective time (the running maximum of the
/// times from the first event), worked out from the events alone.
fn effective_times(store: &Store) -> Vec<(u64, i64)> {
    let mut effective = i64::MIN;
    store
        .history(&HistoryQuery::default())
        .unwrap()
        .iter()
        .map(|e| {
            effective = effective.max(e.time.0);
            (e.seq, effective)
        })
        .collect()
}

/// Times at and around every effective time, and before and after all.
fn probes(times: &[(u64, i64)]) -> Vec<i64> {
    let mut probes = vec![i64::MIN, i64::MAX, 0];
    for &(_, t) in times {
        probes.extend([t - 1, t, t + 1]);
    }
    probes
}

/// Both time queries answer as the effective times of `kept` (the kept
/// events after the horizon) say, at every probe.
fn assert_times_exact(store: &Store, kept: &[(u64, i64)]) {
    for t in probes(kept) {
        let first = kept.iter().find(|(_, e)| *e >= t).map(|(s, _)| *s);
        let last = kept.iter().rev().find(|(_, e)| *e <= t).map(|(s, _)| *s);
        assert_eq!(
            store.first_seq_at_or_after(Micros(t)).unwrap(),
            first,
            "since {t}"
        );
        assert_eq!(
            store.last_seq_at_or_before(Micros(t)).unwrap(),
            last,
            "until {t}"
        );
    }
}

fn time_entries(store: &Store) -> Vec<(i64, u64)> {
    store
        .event_times
        .iter()
        .keys()
        .map(|k| parse_time_key(&k.unwrap()).unwrap())
        .collect()
}

/// Gives every event an entry, as every store before the sparse index has.
fn make_dense(store: &Store) {
    for (seq, effective) in effective_times(store) {
        store
            .event_times
            .insert(&time_key(effective, seq)[..], &[] as &[u8])
            .unwrap();
    }
}

#[test]
fn times_are_placed_exactly_between_entries_and_at_the_edges_of_writes() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_at(&dir.path().join("db"));
    write_varied(&store);
    let times = effective_times(&store);
    assert_eq!(times.len(), 444);
    let entries = time_entries(&store);
    // The first event of each write and every stride of seqs, nothing else.
    let starts = [1u64, 2, 8, 78, 239, 241, 371];
    let expected: Vec<u64> = (1..=444u64)
        .filter(|s| starts.contains(s) || s % STRIDE == 0)
        .collect();
    assert_eq!(entries.iter().map(|e| e.1).collect::<Vec<_>>(), expected);
    for (effective, seq) in entries {
        assert_eq!(effective, times[seq as usize - 1].1, "entry of {seq}");
    }
    assert_times_exact(&store, &times);
    assert!(store.verify().unwrap().problems.is_empty());
    // A history read by time gets the same events as one by seq.
    let since = HistoryQuery {
        since: Some(Micros(3_600)),
        until: Some(Micros(6_000)),
        ..HistoryQuery::default()
    };
    let want: Vec<u64> = times
        .iter()
        .filter(|(_, e)| (3_600..=6_000).contains(e))
        .map(|(s, _)| *s)
        .collect();
    let got: Vec<u64> = store
        .history(&since)
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(got, want);
}

#[test]
fn a_store_with_an_entry_for_every_event_reads_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_at(&dir.path().join("db"));
    write_varied(&store);
    let times = effective_times(&store);
    make_dense(&store);
    assert_eq!(time_entries(&store).len(), times.len());
    assert_times_exact(&store, &times);
    assert!(store.verify().unwrap().problems.is_empty());
    // As a schema 4 store, opened by this build: the step to schema 5
    // changes nothing, and the old entries and the new sparse ones agree.
    drop(store);
    {
        // sled's threads let go of the file lock a moment after the drop.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let db = loop {
            match sled::open(dir.path().join("db")) {
                Err(_) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(10))
                }
                other => break other.unwrap(),
            }
        };
        db.open_tree(trees::META)
            .unwrap()
            .insert(migrations::SCHEMA_VERSION_KEY, &4u32.to_be_bytes())
            .unwrap();
        db.flush().unwrap();
    }
    let store = super::tests::reopen(&dir.path().join("db"));
    assert_eq!(
        migrations::schema_version(&store.db).unwrap(),
        Some(migrations::CURRENT)
    );
    assert_eq!(time_entries(&store).len(), times.len());
    assert_times_exact(&store, &times);
    write(&store, &[(9_500, 3), (11_000, 80)]);
    store.flush_blocking().unwrap();
    let times = effective_times(&store);
    assert_eq!(
        times[444].1, 10_000,
        "the clock stepped back: {:?}",
        times[444]
    );
    assert_times_exact(&store, &times);
    assert!(store.verify().unwrap().problems.is_empty());
}

#[test]
fn a_restart_takes_up_the_effective_time_of_events_after_the_last_entry() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_at(&dir.path().join("db"));
    // Seq 1 has an entry at 1,000; seqs 2 to 4 at 2,000 have none.
    write(&store, &[(1_000, 1), (2_000, 3)]);
    store.flush_blocking().unwrap();
    assert_eq!(time_entries(&store), vec![(1_000, 1)]);
    drop(store);
    let store = super::tests::reopen(&dir.path().join("db"));
    // The clock stepped back across the restart: seq 5 counts at 2,000.
    write(&store, &[(500, 1)]);
    store.flush_blocking().unwrap();
    assert_eq!(time_entries(&store), vec![(1_000, 1), (2_000, 5)]);
    assert_eq!(store.last_seq_at_or_before(Micros(1_999)).unwrap(), Some(1));
    assert_eq!(store.first_seq_at_or_after(Micros(1_001)).unwrap(), Some(2));
    assert!(store.verify().unwrap().problems.is_empty());
}

#[test]
fn retention_at_a_horizon_inside_a_write_keeps_times_exact() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_at(&dir.path().join("db"));
    // One write of 300 events, 15 a second; entries at seqs 1, 64, 128, 192, 256.
    let batches: Vec<(i64, usize)> = (1..=20).map(|i| (i * 1_000_000, 15)).collect();
    write(&store, &batches);
    write(&store, &[(30_000_000, 5)]);
    store.flush_blocking().unwrap();
    let times = effective_times(&store);
    // Everything up to 10 s old at 20 s: the horizon is seq 150, inside the write.
    prune_older_than(&store, 10, Micros(20_000_000));
    assert_eq!(store.horizon(), 150);
    let kept: Vec<(u64, i64)> = times.iter().copied().filter(|(s, _)| *s > 150).collect();
    assert_eq!(effective_times(&store).len(), kept.len());
    // The first event kept has an entry of its own, at its effective time.
    assert_eq!(time_entries(&store)[0], (11_000_000, 151));
    assert_times_exact(&store, &kept);
    assert!(store.verify().unwrap().problems.is_empty());
    assert_eq!(store.registry_at_time(Micros(12_000_000)).unwrap().seq, 180);
    // And after a restart the writer goes on from the right time.
    drop(store);
    let store = super::tests::reopen(&dir.path().join("db"));
    write(&store, &[(25_000_000, 2)]);
    store.flush_blocking().unwrap();
    let last = effective_times(&store).pop().unwrap();
    assert_eq!(last, (307, 30_000_000));
    assert!(store.verify().unwrap().problems.is_empty());
}

#[test]
fn retention_of_a_dense_index_inside_a_write_keeps_times_exact() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_at(&dir.path().join("db"));
    let batches: Vec<(i64, usize)> = (1..=20).map(|i| (i * 1_000_000, 15)).collect();
    write(&store, &batches);
    store.flush_blocking().unwrap();
    make_dense(&store);
    let times = effective_times(&store);
    prune_older_than(&store, 10, Micros(20_000_000));
    assert_eq!(store.horizon(), 150);
    let kept: Vec<(u64, i64)> = times.iter().copied().filter(|(s, _)| *s > 150).collect();
    assert_eq!(time_entries(&store).len(), kept.len());
    assert_times_exact(&store, &kept);
    assert!(store.verify().unwrap().problems.is_empty());
}

#[test]
fn verify_finds_a_time_index_that_cannot_place_an_event() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_at(&dir.path().join("db"));
    write(&store, &[(1_000, 1), (2_000, 150)]);
    store.flush_blocking().unwrap();
    assert!(store.verify().unwrap().problems.is_empty());
    let problems = |store: &Store| store.verify().unwrap().problems;

    // The first event's entry gone: nothing places it.
    store.event_times.remove(time_key(1_000, 1)).unwrap();
    let found = problems(&store);
    assert!(
        found.iter().any(|p| p.contains("event 1, the first kept")),
        "{found:?}"
    );
    store.event_times.insert(time_key(1_000, 1), &[]).unwrap();

    // A stride of events in a row without an entry.
    store.event_times.remove(time_key(2_000, 64)).unwrap();
    let found = problems(&store);
    assert!(
        found
            .iter()
            .any(|p| p.contains("events 2 to 65 are missing")),
        "{found:?}"
    );
    store.event_times.insert(time_key(2_000, 64), &[]).unwrap();

    // An entry earlier than its event's own time.
    store.event_times.remove(time_key(2_000, 128)).unwrap();
    store.event_times.insert(time_key(1_500, 128), &[]).unwrap();
    let found = problems(&store);
    assert!(
        found
            .iter()
            .any(|p| p.contains("puts event 128 before its own time")),
        "{found:?}"
    );
}
