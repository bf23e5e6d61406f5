//! Schema 2: an index of each node's events, so `history NODE` does not scan
//! the whole log.

use serde::Deserialize;

use crate::{trees, MigrationError};

/// The leading fields of every event record ever written, frozen here so this
/// step keeps working whatever the store's own types become. Postcard decodes
/// a prefix and leaves the rest, which is exactly what a header needs.
#[derive(Deserialize)]
enum EventHeader {
    V1(HeaderV1),
}

#[derive(Deserialize)]
struct HeaderV1 {
    #[allow(dead_code)]
    time: i64,
    node: Option<String>,
}

/// The index key: node name, a zero byte (not allowed in names), big-endian seq.
pub fn index_key(node: &str, seq: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(node.len() + 9);
    key.extend_from_slice(node.as_bytes());
    key.push(0);
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

pub(crate) fn run(db: &sled::Db) -> Result<(), MigrationError> {
    let events = db.open_tree(trees::EVENTS)?;
    let index = db.open_tree(trees::NODE_EVENTS)?;
    let fail = |reason: String| MigrationError::StepFailed {
        version: 2,
        description: "index each node's history (node_events)",
        reason,
    };
    let mut batch = sled::Batch::default();
    let mut pending = 0usize;
    for entry in events.iter() {
        let (key, value) = entry?;
        let seq = u64::from_be_bytes(
            key.as_ref()
                .try_into()
                .map_err(|_| fail(format!("event key of {} bytes", key.len())))?,
        );
        let (header, _rest) = postcard::take_from_bytes::<EventHeader>(&value)
            .map_err(|e| fail(format!("event {seq} is unreadable: {e}")))?;
        let EventHeader::V1(HeaderV1 { node, .. }) = header;
        if let Some(node) = node {
            batch.insert(index_key(&node, seq), &[] as &[u8]);
            pending += 1;
        }
        // Bounded batches keep memory flat on a long history.
        if pending >= 10_000 {
            index.apply_batch(std::mem::take(&mut batch))?;
            pending = 0;
        }
    }
    index.apply_batch(batch)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;

    #[derive(Serialize)]
    enum Header<'a> {
        V1 {
            time: i64,
            node: Option<&'a str>,
            tail: u8,
        },
    }

    #[test]
    fn indexes_the_events_of_each_node() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        crate::migrate_to(&db, 1).unwrap();
        let events = db.open_tree(trees::EVENTS).unwrap();
        for (seq, node) in [(1u64, Some("a")), (2, None), (3, Some("b")), (4, Some("a"))] {
            let bytes = postcard::to_allocvec(&Header::V1 {
                time: 7,
                node,
                tail: 9,
            })
            .unwrap();
            events.insert(seq.to_be_bytes(), bytes).unwrap();
        }
        let report = crate::migrate(&db).unwrap();
        assert_eq!(report.steps_run, vec![2, 3, 4, 5, 6, 7]);
        let index = db.open_tree(trees::NODE_EVENTS).unwrap();
        let keys: Vec<Vec<u8>> = index.iter().keys().map(|k| k.unwrap().to_vec()).collect();
        assert_eq!(
            keys,
            vec![index_key("a", 1), index_key("a", 4), index_key("b", 3)]
        );
        // Running the step again changes nothing.
        run(&db).unwrap();
        assert_eq!(index.len(), 3);
    }

    #[test]
    fn an_unreadable_event_names_its_seq() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        crate::migrate_to(&db, 1).unwrap();
        db.open_tree(trees::EVENTS)
            .unwrap()
            .insert(42u64.to_be_bytes(), &[7u8][..])
            .unwrap();
        let err = crate::migrate(&db).unwrap_err().to_string();
        assert!(err.contains("event 42"), "{err}");
        assert_eq!(crate::schema_version(&db).unwrap(), Some(1));
    }
}
