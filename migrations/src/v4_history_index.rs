//! Schema 4: history that lasts months. An index of the log by time, the
//! condition types the log has seen, and the trees for checkpoints (the
//! registry as of a seq) that retention and `at` start from.

use std::collections::BTreeSet;

use serde::Deserialize;

use crate::{trees, MigrationError};

/// The leading fields of every event record ever written, frozen here (see
/// `v2_node_index`): the envelope, the time and the node.
#[derive(Deserialize)]
enum EventHeader {
    V1(HeaderV1),
}

#[derive(Deserialize)]
struct HeaderV1 {
    time: i64,
    #[allow(dead_code)]
    node: Option<String>,
}

/// The variant index of `ConditionChanged` in the first event envelope; its
/// first field is the condition type. Frozen: variants are only appended.
const CONDITION_CHANGED: u32 = 2;

/// The time index key: the event's *effective* time (the newest wall-clock
/// time written up to and including it, so the index is in seq order even
/// when the clock stepped back), then its seq, both big-endian. The time is
/// offset so that negative times sort first.
pub fn time_key(effective_micros: i64, seq: u64) -> [u8; 16] {
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&((effective_micros as u64) ^ (1 << 63)).to_be_bytes());
    key[8..].copy_from_slice(&seq.to_be_bytes());
    key
}

/// The (effective time, seq) of a time index key, `None` if it is not 16 bytes.
pub fn parse_time_key(key: &[u8]) -> Option<(i64, u64)> {
    let time: [u8; 8] = key.get(..8)?.try_into().ok()?;
    let seq: [u8; 8] = key.get(8..16)?.try_into().ok()?;
    (key.len() == 16).then(|| {
        (
            (u64::from_be_bytes(time) ^ (1 << 63)) as i64,
            u64::from_be_bytes(seq),
        )
    })
}

/// The key of one node in a checkpoint: the checkpoint's seq, big-endian,
/// then the node's name.
pub fn checkpoint_node_key(seq: u64, node: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(8 + node.len());
    key.extend_from_slice(&seq.to_be_bytes());
    key.extend_from_slice(node.as_bytes());
    key
}

fn fail(reason: String) -> MigrationError {
    MigrationError::StepFailed {
        version: 4,
        description: DESCRIPTION,
        reason,
    }
}

pub(crate) const DESCRIPTION: &str =
    "index the history by time and condition type; trees for checkpoints";

pub(crate) fn run(db: &sled::Db) -> Result<(), MigrationError> {
    let events = db.open_tree(trees::EVENTS)?;
    let times = db.open_tree(trees::EVENT_TIMES)?;
    let conditions = db.open_tree(trees::CONDITION_TYPES)?;
    db.open_tree(trees::CHECKPOINTS)?;
    db.open_tree(trees::CHECKPOINT_NODES)?;
    let mut seen = BTreeSet::new();
    let mut effective = i64::MIN;
    let mut batch = sled::Batch::default();
    let mut pending = 0usize;
    for entry in events.iter() {
        let (key, value) = entry?;
        let seq = u64::from_be_bytes(
            key.as_ref()
                .try_into()
                .map_err(|_| fail(format!("event key of {} bytes", key.len())))?,
        );
        let unreadable = |e: postcard::Error| fail(format!("event {seq} is unreadable: {e}"));
        let (EventHeader::V1(header), rest) =
            postcard::take_from_bytes::<EventHeader>(&value).map_err(unreadable)?;
        let (variant, rest) = postcard::take_from_bytes::<u32>(rest).map_err(unreadable)?;
        if variant == CONDITION_CHANGED {
            let (condition, _) = postcard::take_from_bytes::<String>(rest).map_err(unreadable)?;
            seen.insert(condition);
        }
        effective = effective.max(header.time);
        batch.insert(&time_key(effective, seq)[..], &[] as &[u8]);
        pending += 1;
        // Bounded batches keep memory flat on a long history.
        if pending >= 10_000 {
            times.apply_batch(std::mem::take(&mut batch))?;
            pending = 0;
        }
    }
    times.apply_batch(batch)?;
    for condition in seen {
        conditions.insert(condition.as_bytes(), &[] as &[u8])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;

    /// The leading part of an event record as the store writes it.
    #[derive(Serialize)]
    enum Record<'a> {
        V1 {
            time: i64,
            node: Option<&'a str>,
            kind: Kind<'a>,
        },
    }

    #[derive(Serialize)]
    enum Kind<'a> {
        Registered(u8),
        Deleted { reason: &'a str },
        ConditionChanged { condition: &'a str, tail: u8 },
    }

    fn store_with(events: &[(u64, i64, Kind)]) -> (tempfile::TempDir, sled::Db) {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        crate::migrate_to(&db, 3).unwrap();
        let tree = db.open_tree(trees::EVENTS).unwrap();
        for (seq, time, kind) in events {
            let kind = match kind {
                Kind::Registered(x) => Kind::Registered(*x),
                Kind::Deleted { reason } => Kind::Deleted { reason },
                Kind::ConditionChanged { condition, tail } => Kind::ConditionChanged {
                    condition,
                    tail: *tail,
                },
            };
            let bytes = postcard::to_allocvec(&Record::V1 {
                time: *time,
                node: Some("a"),
                kind,
            })
            .unwrap();
            tree.insert(seq.to_be_bytes(), bytes).unwrap();
        }
        (dir, db)
    }

    #[test]
    fn indexes_effective_times_and_condition_types() {
        let (_dir, db) = store_with(&[
            (1, 100, Kind::Registered(0)),
            (
                2,
                200,
                Kind::ConditionChanged {
                    condition: "Ready",
                    tail: 1,
                },
            ),
            // The clock stepped back: the index keeps 200, so it stays in seq order.
            (
                3,
                150,
                Kind::ConditionChanged {
                    condition: "DiskPressure",
                    tail: 1,
                },
            ),
            (4, 300, Kind::Deleted { reason: "gone" }),
        ]);
        let report = crate::migrate(&db).unwrap();
        assert_eq!(report.steps_run, vec![4, 5, 6, 7]);
        let times: Vec<(i64, u64)> = db
            .open_tree(trees::EVENT_TIMES)
            .unwrap()
            .iter()
            .keys()
            .map(|k| parse_time_key(&k.unwrap()).unwrap())
            .collect();
        assert_eq!(times, vec![(100, 1), (200, 2), (200, 3), (300, 4)]);
        let conditions: Vec<Vec<u8>> = db
            .open_tree(trees::CONDITION_TYPES)
            .unwrap()
            .iter()
            .keys()
            .map(|k| k.unwrap().to_vec())
            .collect();
        assert_eq!(
            conditions,
            vec![b"DiskPressure".to_vec(), b"Ready".to_vec()]
        );
        // Running the step again changes nothing.
        run(&db).unwrap();
        assert_eq!(db.open_tree(trees::EVENT_TIMES).unwrap().len(), 4);
    }

    #[test]
    fn time_keys_sort_as_times_then_seqs() {
        let keys = [
            time_key(i64::MIN, 5),
            time_key(-1, 1),
            time_key(0, 0),
            time_key(0, 9),
            time_key(1_700_000_000_000_000, 2),
        ];
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        for k in keys {
            let (t, s) = parse_time_key(&k).unwrap();
            assert_eq!(time_key(t, s), k);
        }
        assert_eq!(parse_time_key(&[1, 2, 3]), None);
        assert!(checkpoint_node_key(1, "zz") < checkpoint_node_key(2, "a"));
    }

    #[test]
    fn an_unreadable_event_names_its_seq() {
        let (_dir, db) = store_with(&[]);
        db.open_tree(trees::EVENTS)
            .unwrap()
            .insert(7u64.to_be_bytes(), &[0u8, 2][..])
            .unwrap();
        let err = crate::migrate(&db).unwrap_err().to_string();
        assert!(err.contains("event 7"), "{err}");
        assert_eq!(crate::schema_version(&db).unwrap(), Some(3));
    }
}
