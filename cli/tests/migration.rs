//! A store written in an older layout (schema 1, kept under fixtures/) is
//! brought up to date on open and loses nothing.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::path::{Path, PathBuf};

use nodekeeper::model::{ConditionStatus, Event, EventKind, Micros};
use nodekeeper::store::{records, HistoryQuery, Store, StoreOptions};

/// The repository's top: these tests live in cli/.
const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

fn fixture() -> PathBuf {
    Path::new(REPO).join("fixtures/store-schema1")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn a_schema_1_store_is_upgraded_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    copy_dir(&fixture(), &db);
    {
        let raw = sled::open(&db).unwrap();
        assert_eq!(
            migrations::schema_version(&raw).unwrap(),
            Some(1),
            "the fixture is schema 1"
        );
        assert!(!raw
            .tree_names()
            .iter()
            .any(|n| n.as_ref() == b"node_events"));
    }
    // sled's background threads let go of the file lock shortly after the drop.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let store = loop {
        match Store::open(&db, &StoreOptions::default()) {
            Err(nodekeeper::store::StoreError::Locked { .. })
                if std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            other => break other.unwrap(),
        }
    };
    let status = store.status().unwrap();
    assert_eq!(status.schema_version, migrations::CURRENT);
    assert_eq!((status.nodes, status.events), (2, 4));
    // The new per-node index answers exactly what a scan of the log does.
    let all = store.history(&HistoryQuery::default()).unwrap();
    for node in ["edge-1", "edge-2"] {
        let indexed = store
            .history(&HistoryQuery {
                node: Some(node.into()),
                ..Default::default()
            })
            .unwrap();
        let scanned: Vec<Event> = all
            .iter()
            .filter(|e| e.node.as_deref() == Some(node))
            .cloned()
            .collect();
        assert!(!indexed.is_empty());
        assert_eq!(indexed, scanned);
    }
    assert!(
        store.verify().unwrap().problems.is_empty(),
        "{:?}",
        store.verify().unwrap()
    );
    let edge2 = store.node("edge-2").unwrap().unwrap();
    assert_eq!(edge2.ready(), ConditionStatus::Unknown);
}

/// Writes the fixture. Kept for the record of how it was made: run with
/// `cargo test --test migration -- --ignored` only to recreate it. The
/// fixture on disk was written by the first release, with V1 node records;
/// this writer now writes the current record versions.
#[test]
#[ignore = "writes the fixture anew: run it only to recreate fixtures/"]
fn write_schema_1_fixture() {
    let path = fixture();
    let _ = std::fs::remove_dir_all(&path);
    let db = sled::Config::new().path(&path).open().unwrap();
    migrations::migrate_to(&db, 1).unwrap();
    let nodes = db.open_tree("nodes").unwrap();
    let events = db.open_tree("events").unwrap();
    let mut seq = 0u64;
    let mut log = |node: Option<&str>, time: i64, kind: EventKind| {
        seq += 1;
        let event = Event {
            seq,
            time: Micros(time),
            node: node.map(str::to_string),
            kind,
        };
        events
            .insert(seq.to_be_bytes(), records::encode_event(&event))
            .unwrap();
    };
    log(
        None,
        1_700_000_000_000_000,
        EventKind::ControllerStarted {
            instance: "fixture".into(),
            downtime_seconds: None,
            previous_stop_clean: false,
        },
    );
    for (name, ready) in [
        ("edge-1", ConditionStatus::True),
        ("edge-2", ConditionStatus::Unknown),
    ] {
        let t = 1_700_000_001_000_000;
        let mut node = nodekeeper::model::Node {
            name: name.into(),
            uid: format!("uid-{name}"),
            created: Micros(t),
            resource_version: 0,
            source: "static".into(),
            labels: Default::default(),
            annotations: Default::default(),
            external_id: name.into(),
            provider_id: String::new(),
            capacity: Default::default(),
            unschedulable: false,
            taints: vec![],
            addresses: vec![nodekeeper::model::Address {
                kind: nodekeeper::model::AddressKind::InternalIP,
                address: "10.0.0.1".into(),
            }],
            conditions: vec![nodekeeper::controller::conditions::never_probed(Micros(t))],
            node_info: Default::default(),
            reported: Default::default(),
        };
        log(
            Some(name),
            t,
            EventKind::Registered {
                node: Box::new(node.clone()),
            },
        );
        if ready == ConditionStatus::True {
            let t2 = t + 1_000_000;
            log(
                Some(name),
                t2,
                EventKind::ConditionChanged {
                    condition: "Ready".into(),
                    from: Some(ConditionStatus::Unknown),
                    to: ConditionStatus::True,
                    reason: "KubeletReady".into(),
                    message: "kubelet /healthz endpoint returns ok".into(),
                },
            );
            let c = node.condition_mut("Ready").unwrap();
            c.status = ConditionStatus::True;
            c.last_transition = Micros(t2);
            c.last_heartbeat = Micros(t2);
            c.reason = "KubeletReady".into();
            c.message = "kubelet /healthz endpoint returns ok".into();
        }
        nodes
            .insert(name.as_bytes(), records::encode_node(&node))
            .unwrap();
    }
    db.flush().unwrap();
}
