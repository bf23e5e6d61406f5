//! Schema steps for the nodekeeper store, run in order when a store is opened.
//!
//! The schema version lives in the `meta` tree under [`SCHEMA_VERSION_KEY`] as
//! a big-endian `u32`. Each step moves the store from version `n - 1` to `n`,
//! is idempotent (a crash half-way through a step re-runs it whole), and is
//! flushed before the new version is recorded. A store written by a newer
//! nodekeeper is refused rather than guessed at.
#![forbid(unsafe_code)]

mod v1_layout;
pub mod v2_node_index;
mod v3_leases;
pub mod v4_history_index;
mod v5_sparse_indexes;
mod v6_node_objects;
mod v7_api_objects;

use thiserror::Error;

/// Names of the trees, shared with the store.
pub mod trees {
    /// Node name → node record.
    pub const NODES: &str = "nodes";
    /// Big-endian `seq` → event record: the history.
    pub const EVENTS: &str = "events";
    /// Node name, `0x00`, big-endian `seq` → nothing: each node's history
    /// (schema 2); since schema 5 the first seq of a run of the node's events
    /// → the run's length (big-endian `u32`; nothing for one event).
    pub const NODE_EVENTS: &str = "node_events";
    /// Big-endian `seq` → mirror work waiting for the API server.
    pub const OUTBOX: &str = "outbox";
    /// Small named values: schema version, instance, clean-stop marker.
    pub const META: &str = "meta";
    /// Node name → the node's Lease in `kube-node-lease` (schema 3).
    pub const LEASES: &str = "leases";
    /// Effective time, seq (see [`crate::v4_history_index::time_key`]) →
    /// nothing: the history by time (schema 4); since schema 5 an entry for
    /// the first event of each write and every 64th seq, not every event.
    pub const EVENT_TIMES: &str = "event_times";
    /// Condition type → nothing: every condition the history has seen change (schema 4).
    pub const CONDITION_TYPES: &str = "condition_types";
    /// Big-endian seq → a checkpoint's header: the registry as of that seq is
    /// kept, complete, under the same seq in `checkpoint_nodes` (schema 4).
    pub const CHECKPOINTS: &str = "checkpoints";
    /// Big-endian seq, node name → the node as of that checkpoint (schema 4).
    pub const CHECKPOINT_NODES: &str = "checkpoint_nodes";
    /// Node name, `0x00`, resource, `0x00`, object name → an object the
    /// node's kubelet keeps, as its JSON (schema 6).
    pub const NODE_OBJECTS: &str = "node_objects";
    /// Resource, `0x00`, namespace, `0x00`, name → an API object kept on
    /// its own, not with a node (bootstrap-token Secrets, CSRs), as its
    /// version and JSON (schema 7).
    pub const API_OBJECTS: &str = "api_objects";
}

/// The `meta` key holding the schema version.
pub const SCHEMA_VERSION_KEY: &[u8] = b"schema_version";

/// The schema this build writes.
pub const CURRENT: u32 = 7;

/// One schema step: what it does and how.
struct Step {
    version: u32,
    description: &'static str,
    run: fn(&sled::Db) -> Result<(), MigrationError>,
}

const STEPS: &[Step] = &[
    Step {
        version: 1,
        description: "create the nodes, events, outbox and meta trees",
        run: v1_layout::run,
    },
    Step {
        version: 2,
        description: "index each node's history (node_events)",
        run: v2_node_index::run,
    },
    Step {
        version: 3,
        description: "keep node Leases (leases)",
        run: v3_leases::run,
    },
    Step {
        version: 4,
        description: v4_history_index::DESCRIPTION,
        run: v4_history_index::run,
    },
    Step {
        version: 5,
        description: v5_sparse_indexes::DESCRIPTION,
        run: v5_sparse_indexes::run,
    },
    Step {
        version: 6,
        description: "keep the objects a node's kubelet writes beside its Node (node_objects)",
        run: v6_node_objects::run,
    },
    Step {
        version: 7,
        description: "keep API objects of their own (api_objects: bootstrap tokens, CSRs); issued certificates in the history, Leases' owners",
        run: v7_api_objects::run,
    },
];

/// Failures while bringing a store to the current schema.
#[derive(Debug, Error)]
pub enum MigrationError {
    #[error(
        "this store was written by a newer nodekeeper (schema {found}; this build knows up to {supported}); \
         run a newer nodekeeper, or export with it and import here"
    )]
    StoreTooNew { found: u32, supported: u32 },
    #[error("the schema version in the store is unreadable ({0} bytes); the store is damaged: restore from an export")]
    BadVersion(usize),
    #[error("schema step {version} ({description}) failed: {reason}")]
    StepFailed {
        version: u32,
        description: &'static str,
        reason: String,
    },
    #[error("store I/O failed during migration: {0}")]
    Sled(#[from] sled::Error),
}

/// What [`migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The version found, `None` for a new store.
    pub from: Option<u32>,
    pub to: u32,
    pub steps_run: Vec<u32>,
}

/// Reads the recorded schema version, `None` for a store that has none yet.
pub fn schema_version(db: &sled::Db) -> Result<Option<u32>, MigrationError> {
    let meta = db.open_tree(trees::META)?;
    match meta.get(SCHEMA_VERSION_KEY)? {
        None => Ok(None),
        Some(bytes) => {
            let raw: [u8; 4] = bytes
                .as_ref()
                .try_into()
                .map_err(|_| MigrationError::BadVersion(bytes.len()))?;
            Ok(Some(u32::from_be_bytes(raw)))
        }
    }
}

/// Runs every step the store has not had yet, in order, up to [`CURRENT`].
pub fn migrate(db: &sled::Db) -> Result<Report, MigrationError> {
    migrate_to(db, CURRENT)
}

/// Runs the steps up to `target` only. For tests and fixtures that need a
/// store of an older layout.
pub fn migrate_to(db: &sled::Db, target: u32) -> Result<Report, MigrationError> {
    let from = schema_version(db)?;
    let found = from.unwrap_or(0);
    if found > CURRENT {
        return Err(MigrationError::StoreTooNew {
            found,
            supported: CURRENT,
        });
    }
    let mut steps_run = Vec::new();
    for step in STEPS
        .iter()
        .filter(|s| s.version > found && s.version <= target)
    {
        (step.run)(db)?;
        // The step's writes must be on disk before the version says they are.
        db.flush()?;
        db.open_tree(trees::META)?
            .insert(SCHEMA_VERSION_KEY, &step.version.to_be_bytes())?;
        db.flush()?;
        steps_run.push(step.version);
    }
    Ok(Report {
        from,
        to: found.max(target.min(CURRENT)),
        steps_run,
    })
}

/// Describes the steps, for `db status`.
pub fn describe_steps() -> impl Iterator<Item = (u32, &'static str)> {
    STEPS.iter().map(|s| (s.version, s.description))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_db() -> (tempfile::TempDir, sled::Db) {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        (dir, db)
    }

    #[test]
    fn a_new_store_gets_every_step() {
        let (_dir, db) = temp_db();
        let report = migrate(&db).unwrap();
        assert_eq!(
            report,
            Report {
                from: None,
                to: CURRENT,
                steps_run: vec![1, 2, 3, 4, 5, 6, 7]
            }
        );
        assert_eq!(schema_version(&db).unwrap(), Some(CURRENT));
        let names: Vec<_> = db
            .tree_names()
            .into_iter()
            .map(|n| String::from_utf8(n.to_vec()).unwrap())
            .collect();
        for tree in [
            trees::NODES,
            trees::EVENTS,
            trees::NODE_EVENTS,
            trees::OUTBOX,
            trees::META,
            trees::LEASES,
            trees::EVENT_TIMES,
            trees::CONDITION_TYPES,
            trees::CHECKPOINTS,
            trees::CHECKPOINT_NODES,
            trees::NODE_OBJECTS,
        ] {
            assert!(
                names.iter().any(|n| n == tree),
                "missing tree {tree}: {names:?}"
            );
        }
    }

    #[test]
    fn migrating_twice_does_nothing_the_second_time() {
        let (_dir, db) = temp_db();
        migrate(&db).unwrap();
        let again = migrate(&db).unwrap();
        assert_eq!(again.steps_run, Vec::<u32>::new());
        assert_eq!(again.from, Some(CURRENT));
    }

    #[test]
    fn a_newer_store_is_refused_and_left_alone() {
        let (_dir, db) = temp_db();
        migrate(&db).unwrap();
        let meta = db.open_tree(trees::META).unwrap();
        meta.insert(SCHEMA_VERSION_KEY, &(CURRENT + 1).to_be_bytes())
            .unwrap();
        let err = migrate(&db).unwrap_err();
        assert!(matches!(err, MigrationError::StoreTooNew { found, .. } if found == CURRENT + 1));
        assert!(err.to_string().contains("newer nodekeeper"), "{err}");
        assert_eq!(schema_version(&db).unwrap(), Some(CURRENT + 1));
    }

    #[test]
    fn a_damaged_version_is_reported() {
        let (_dir, db) = temp_db();
        db.open_tree(trees::META)
            .unwrap()
            .insert(SCHEMA_VERSION_KEY, b"x")
            .unwrap();
        assert!(matches!(migrate(&db), Err(MigrationError::BadVersion(1))));
    }

    #[test]
    fn steps_are_numbered_in_order_up_to_current() {
        let versions: Vec<u32> = STEPS.iter().map(|s| s.version).collect();
        assert_eq!(versions, (1..=CURRENT).collect::<Vec<_>>());
    }
}
