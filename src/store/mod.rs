//! The durable registry and history, in sled: one tree per entity, records in
//! a versioned envelope, every change an event written in the same
//! transaction as the node it changes and the indexes that find it.
//!
//! Writes become *durable* only at [`Store::flush`]; readers that must not
//! show what a crash could lose ask for history up to [`Store::durable_seq`].
//! The history is kept from a *horizon* on (see [`retention`]): the registry
//! as of the horizon is a checkpoint, and everything after it is exact.
//!
//! `Store` is the one handle every reader and the writer share; its methods
//! here work on the same trees and the same transaction (an event and its
//! node change together). What stands alone lives beside it: queries,
//! export and import, retention, checkpoints, compaction, records, the outbox.

mod api_objects;
pub mod checkpoint;
pub mod compact;
mod exchange;
pub mod heartbeats;
mod node_bytes;
mod node_index;
mod outbox;
mod query;
mod read_only;
pub mod records;
pub mod retention;
mod time_index;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use migrations::v4_history_index::time_key;
use migrations::{trees, v2_node_index::index_key};
use sled::transaction::{ConflictableTransactionError, TransactionError, Transactional};
use thiserror::Error;

use crate::model::{Event, EventKind, Lease, Micros, Node, NodeObject, ObjectKey};
pub use api_objects::{ApiObject, ApiWriteError, DeletionsForgotten};
pub use checkpoint::{Checkpoint, RegistryAt};
pub use exchange::{
    ExportSummary, ImportProgress, ImportSummary, EXPORT_FORMAT_VERSION, MAX_LINE_BYTES,
};
pub use outbox::{OutboxEntry, OutboxKey, MIRRORED_OBJECTS};
pub use query::{HistoryPage, HistoryQuery};
use records::DecodeError;
pub use retention::{ReadPin, RetentionConfig};

/// sled's default cache is 1 GiB and RSS follows it; a registry needs far less.
pub const DEFAULT_CACHE_CAPACITY: u64 = 64 << 20;

const META_INSTANCE: &[u8] = b"instance";
const META_CLEAN_STOP: &[u8] = b"last_clean_stop";
const META_CREATED: &[u8] = b"created";
/// Big-endian seq: the history before it (and it) is pruned; the registry as
/// of it is the checkpoint at that seq.
const META_HORIZON: &[u8] = b"history_horizon";
/// Present while an import loads the store: what it was loading, since when.
const META_IMPORT_INCOMPLETE: &[u8] = b"import_incomplete";

/// The last seq a store writes. Seqs are resourceVersions and `seq` numbers
/// in `/v1/history`'s JSON; this is the largest integer every JSON reader
/// (a browser's, the console's) reads exactly, and still leaves more than
/// 280 years of a million events a second. An import past it is refused,
/// so no seq ever wraps around onto the first events.
pub const MAX_SEQ: u64 = (1 << 53) - 1;

/// Failures of the store, each saying what the user can do.
#[derive(Debug, Error)]
pub enum StoreError {
    #[error("the store at {path} is in use by another nodekeeper process; stop it, or inspect through it (the CLI does this by itself when it can reach it)")]
    Locked { path: PathBuf },
    #[error("cannot open the store at {path}: {source}")]
    Open { path: PathBuf, source: sled::Error },
    #[error(
        "cannot read the store at {path}: {source}; run this as a user who may read it (the \
         controller's, or root), or read through the running controller with --server URL"
    )]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "this user may read the store at {path} but not write it, so it is read from a copy \
         (sled opens stores for writing), and the copy failed: {what}: {source}; give the copy \
         room with TMPDIR, or run this as the store's owner"
    )]
    Copy {
        path: PathBuf,
        what: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Migration(#[from] migrations::MigrationError),
    #[error("store I/O failed: {0}; nothing after the last flush was acknowledged")]
    Io(#[from] sled::Error),
    #[error("the store holds a damaged record: {0}; run `nodekeeper db verify`, and restore from an export if needed")]
    Decode(#[from] DecodeError),
    #[error("import refused: the store at {0} is not empty; import into a new --db path")]
    NotEmpty(PathBuf),
    #[error("import failed at line {line}: {reason}; the store was left empty")]
    Import { line: usize, reason: String },
    #[error("export failed: {0}")]
    Export(std::io::Error),
    #[error(
        "the store has written seq {last}, and {wanted} more would pass {MAX_SEQ}, the last seq a \
         store can write: nothing was written. Only an import made by an earlier build leaves a \
         store here; start the controller on a new store"
    )]
    SeqExhausted { last: u64, wanted: u64 },
    #[error(
        "the store at {path} holds an import that did not finish ({detail}): its contents are incomplete \
         and nothing uses it. Remove it (`rm -r {path}`) and run `nodekeeper db import` again"
    )]
    ImportIncomplete { path: PathBuf, detail: String },
    #[error(transparent)]
    Compaction(#[from] compact::CompactError),
    #[error(
        "the history before seq {requested} is no longer kept: it was pruned up to seq {horizon} (retention); \
         read from seq {horizon} on"
    )]
    Expired { requested: u64, horizon: u64 },
    #[error("{0} is before the kept history: the oldest state kept is the checkpoint at {1} (seq {2}); ask for a time from then on")]
    BeforeHorizon(Micros, Micros, u64),
    #[error("node {0:?} is unknown: it is not in the registry and the kept history has no event about it (`nodekeeper nodes` lists the registry)")]
    UnknownNode(String),
    #[error("condition type {condition:?} is unknown: no node has it and the kept history has no change of it; known types: {known}")]
    UnknownCondition { condition: String, known: String },
}

impl From<TransactionError<StoreError>> for StoreError {
    fn from(e: TransactionError<StoreError>) -> Self {
        match e {
            TransactionError::Abort(e) => e,
            TransactionError::Storage(e) => StoreError::Io(e),
        }
    }
}

/// How to open a store.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub cache_capacity: u64,
    /// Events between checkpoints; `None`: [`checkpoint::interval_for`] the registry's size.
    pub checkpoint_interval: Option<u64>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            cache_capacity: DEFAULT_CACHE_CAPACITY,
            checkpoint_interval: None,
        }
    }
}

/// Changes written together: node records, their events, and deletions.
#[derive(Debug, Default)]
pub struct Batch {
    time: Micros,
    puts: Vec<Node>,
    deletes: Vec<String>,
    events: Vec<(Option<String>, EventKind)>,
}

impl Batch {
    /// A batch whose events happen at `time` (wall clock).
    pub fn new(time: Micros) -> Batch {
        Batch {
            time,
            ..Batch::default()
        }
    }

    /// Stores `node` along with the events that explain the change.
    pub fn record(&mut self, node: Node, events: impl IntoIterator<Item = EventKind>) {
        for kind in events {
            self.events.push((Some(node.name.clone()), kind));
        }
        self.puts.push(node);
    }

    /// Removes a node from the registry; its history stays.
    pub fn delete(&mut self, name: &str, reason: &str) {
        self.events.push((
            Some(name.to_string()),
            EventKind::Deleted {
                reason: reason.to_string(),
            },
        ));
        self.deletes.push(name.to_string());
    }

    /// An event about a node that does not change its record.
    pub fn node_event(&mut self, name: &str, kind: EventKind) {
        self.events.push((Some(name.to_string()), kind));
    }

    /// A controller-wide event.
    pub fn controller_event(&mut self, kind: EventKind) {
        self.events.push((None, kind));
    }

    pub fn is_empty(&self) -> bool {
        self.puts.is_empty() && self.deletes.is_empty() && self.events.is_empty()
    }

    /// How many node records it puts.
    pub fn len(&self) -> usize {
        self.puts.len()
    }
}

/// What a [`Batch`] became once written.
#[derive(Debug, Default)]
pub struct Written {
    pub events: Vec<Event>,
    /// The batch's node records, with `resource_version` set.
    pub nodes: Vec<Node>,
    /// The nodes the batch removed from the registry.
    pub deleted: Vec<String>,
}

/// Outbox entries to write, by encoded key: the newest seq, its reason and
/// when it was queued.
type OutboxWork = std::collections::BTreeMap<Vec<u8>, (u64, Option<String>, Micros)>;

/// A batch made ready to write: seqs and versions given, records encoded.
struct Prepared {
    written: Written,
    time: Micros,
    /// The time its events are indexed at: never older than an earlier batch's.
    effective_time: i64,
    encoded_nodes: Vec<(String, Vec<u8>)>,
    encoded_events: Vec<Vec<u8>>,
}

impl Prepared {
    /// `batch` written after seq `last_seq` and event time `last_time`.
    fn of(batch: Batch, last_seq: u64, last_time: i64) -> Prepared {
        let Batch {
            time,
            mut puts,
            deletes,
            events,
        } = batch;
        let events: Vec<Event> = events
            .into_iter()
            .enumerate()
            .map(|(i, (node, kind))| Event {
                seq: last_seq + 1 + i as u64,
                time,
                node,
                kind,
            })
            .collect();
        // Each node's newest event that changes it, found once: a batch of
        // thousands of nodes (a pass that taints them all) is not a search
        // of every event for every node.
        let mut newest: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
        for e in &events {
            if let (Some(node), true) = (e.node.as_deref(), e.kind.changes_node()) {
                newest.insert(node, e.seq);
            }
        }
        for node in &mut puts {
            if let Some(seq) = newest.get(node.name.as_str()) {
                node.resource_version = *seq;
            }
        }
        let encoded_nodes = puts
            .iter()
            .map(|n| (n.name.clone(), records::encode_node(n)))
            .collect();
        let encoded_events = events.iter().map(records::encode_event).collect();
        Prepared {
            written: Written {
                events,
                nodes: puts,
                deleted: deletes,
            },
            time,
            effective_time: last_time.max(time.0),
            encoded_nodes,
            encoded_events,
        }
    }

    fn is_empty(&self) -> bool {
        self.written.events.is_empty()
            && self.written.nodes.is_empty()
            && self.written.deleted.is_empty()
    }
}

/// Facts about a store, for `db status`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoreStatus {
    pub path: PathBuf,
    pub schema_version: u32,
    pub nodes: usize,
    pub events: usize,
    #[serde(rename = "outboxEntries")]
    pub outbox: usize,
    pub last_seq: u64,
    pub first_event: Option<Micros>,
    pub last_event: Option<Micros>,
    #[serde(rename = "sizeOnDiskBytes")]
    pub size_on_disk: u64,
    pub last_instance: Option<String>,
    pub last_clean_stop: Option<Micros>,
    /// Where the kept history starts; `None` while nothing was ever pruned.
    #[serde(default)]
    pub horizon: Option<Checkpoint>,
    /// The checkpoints kept, oldest first (the horizon's among them).
    #[serde(default)]
    pub checkpoints: Vec<Checkpoint>,
    /// What each tree holds.
    #[serde(default)]
    pub trees: Vec<TreeSize>,
    /// The retention a running controller applies (`None` on a stopped store).
    #[serde(default)]
    pub retention: Option<retention::RetentionStatus>,
}

/// The records of one sled tree and their size (keys and values, as stored
/// before sled's own overhead).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct TreeSize {
    pub name: String,
    pub records: u64,
    pub bytes: u64,
}

/// What `db verify` found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct VerifyReport {
    pub nodes: usize,
    pub events: usize,
    pub problems: Vec<String>,
}

/// The newest seq and effective time written: the writer's lock serialises
/// writers so seq order is commit order.
#[derive(Debug, Default, Clone, Copy)]
struct WriterState {
    last_seq: u64,
    /// The newest event time written so far: an event's time in the time
    /// index is never older than this, so the index is in seq order.
    last_time: i64,
}

/// The store. One per process; sled holds a file lock on the directory.
pub struct Store {
    path: PathBuf,
    db: sled::Db,
    nodes: sled::Tree,
    events: sled::Tree,
    node_events: sled::Tree,
    event_times: sled::Tree,
    condition_types: sled::Tree,
    checkpoints: sled::Tree,
    checkpoint_nodes: sled::Tree,
    outbox: sled::Tree,
    meta: sled::Tree,
    leases: sled::Tree,
    node_objects: sled::Tree,
    api_objects: sled::Tree,
    /// The last version given to an API object, and what serializes the
    /// giving.
    api_versions: AtomicU64,
    api_version_lock: Mutex<()>,
    /// Told the newest version after each write of `api_objects`.
    api_changed: tokio::sync::watch::Sender<u64>,
    /// The objects of `api_objects` deleted lately, for watches.
    api_deleted: Mutex<api_objects::Deletions>,
    writer: Mutex<WriterState>,
    durable_seq: AtomicU64,
    /// Whether changes queue mirror work (an API server is configured).
    mirroring: AtomicBool,
    /// The condition types in `condition_types`, so a write adds only new ones.
    conditions_seen: RwLock<BTreeSet<String>>,
    /// The horizon and the readers that hold history back from pruning.
    guard: Arc<retention::HistoryGuard>,
    /// What the retention task last reported.
    retention: Mutex<Option<retention::RetentionStatus>>,
    /// Events between checkpoints, when not the default.
    checkpoint_interval: Option<u64>,
    /// Set when this is a copy of a store the user may not write (see
    /// [`Store::open_for_reading`]). Last, so the copy goes after sled.
    copy: Option<read_only::Copy>,
}

/// Whether `path` holds a store: a controller ran on it, or an import made it.
pub fn exists(path: &Path) -> bool {
    path.join("db").is_file()
}

/// Whether anything is at `path`, for the commands that read a store: an
/// error when the path cannot be looked at (a directory on the way this
/// user may not enter), which is not the same as no store.
pub fn is_there(path: &Path) -> Result<bool, StoreError> {
    // One look, before a one-shot command opens the store.
    #[allow(clippy::disallowed_methods)]
    let found = std::fs::metadata(path);
    match found {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(StoreError::Unreadable {
            path: path.to_path_buf(),
            source,
        }),
    }
}

impl Store {
    /// Opens (or creates) the store at `path` and brings it to the current
    /// schema. A store an interrupted compaction or import left is refused.
    pub fn open(path: &Path, options: &StoreOptions) -> Result<Store, StoreError> {
        compact::check_path(path)?;
        let store = Store::open_unchecked(path, options)?;
        if let Some(detail) = store.meta.get(META_IMPORT_INCOMPLETE)? {
            return Err(StoreError::ImportIncomplete {
                path: path.to_path_buf(),
                detail: String::from_utf8_lossy(&detail).into_owned(),
            });
        }
        Ok(store)
    }

    /// Opens the stopped store at `path` to read it: itself, or, when this
    /// user may read it but not write it, a copy of it (see [`read_only`]).
    pub fn open_for_reading(path: &Path, options: &StoreOptions) -> Result<Store, StoreError> {
        match Store::open(path, options) {
            Err(e) if read_only::is_not_writable(&e) => read_only::open_copy(path, options),
            other => other,
        }
    }

    /// Whether this is a copy of a store this user may not write: what is
    /// written to it is lost, so nothing may be.
    pub fn is_copy(&self) -> bool {
        self.copy.is_some()
    }

    /// The store's own path: the one it was copied from, for a copy.
    pub fn origin(&self) -> &Path {
        self.copy.as_ref().map_or(&self.path, |c| &c.original)
    }

    /// Opens sled, migrates, and reads the store's state back (seqs,
    /// horizon, condition types); [`Store::open`] then refuses what is unusable.
    fn open_unchecked(path: &Path, options: &StoreOptions) -> Result<Store, StoreError> {
        let db = sled::Config::new()
            .path(path)
            .cache_capacity(options.cache_capacity)
            // Every acknowledged write is flushed explicitly; a background
            // flusher would only add work (and promises nothing).
            .flush_every_ms(None)
            .open()
            .map_err(|source| classify_open_error(path, source))?;
        migrations::migrate(&db)?;
        let store = Store {
            path: path.to_path_buf(),
            nodes: db.open_tree(trees::NODES)?,
            events: db.open_tree(trees::EVENTS)?,
            node_events: db.open_tree(trees::NODE_EVENTS)?,
            event_times: db.open_tree(trees::EVENT_TIMES)?,
            condition_types: db.open_tree(trees::CONDITION_TYPES)?,
            checkpoints: db.open_tree(trees::CHECKPOINTS)?,
            checkpoint_nodes: db.open_tree(trees::CHECKPOINT_NODES)?,
            outbox: db.open_tree(trees::OUTBOX)?,
            meta: db.open_tree(trees::META)?,
            leases: db.open_tree(trees::LEASES)?,
            node_objects: db.open_tree(trees::NODE_OBJECTS)?,
            api_versions: AtomicU64::new(0),
            api_version_lock: Mutex::new(()),
            api_changed: tokio::sync::watch::Sender::new(0),
            api_deleted: Mutex::new(api_objects::Deletions::default()),
            api_objects: db.open_tree(trees::API_OBJECTS)?,
            db,
            writer: Mutex::new(WriterState::default()),
            durable_seq: AtomicU64::new(0),
            mirroring: AtomicBool::new(false),
            conditions_seen: RwLock::new(BTreeSet::new()),
            guard: Arc::new(retention::HistoryGuard::new(0)),
            retention: Mutex::new(None),
            checkpoint_interval: options.checkpoint_interval.filter(|&n| n > 0),
            copy: None,
        };
        if store.meta.get(META_CREATED)?.is_none() {
            store
                .meta
                .insert(META_CREATED, &Micros::now().0.to_be_bytes())?;
            store.db.flush()?;
        }
        let horizon = store.read_horizon()?;
        let last_event = store
            .events
            .last()?
            .map(|(k, _)| seq_from_key(&k))
            .transpose()?
            .unwrap_or(0);
        let last_time = store.last_effective_time()?;
        // Pruning never goes past the newest checkpoint, so the horizon is a
        // seq that was handed out even when every event up to it is gone.
        let last = last_event.max(horizon);
        *store.lock_writer() = WriterState {
            last_seq: last,
            last_time,
        };
        // What was recovered from disk is by definition durable.
        store.durable_seq.store(last, Ordering::Release);
        store.guard.set_horizon(horizon);
        let mut seen = BTreeSet::new();
        for key in store.condition_types.iter().keys() {
            seen.insert(String::from_utf8_lossy(&key?).into_owned());
        }
        *store
            .conditions_seen
            .write()
            .unwrap_or_else(|p| p.into_inner()) = seen;
        let api_version = Store::read_api_version(&store.api_objects)?;
        store.api_versions.store(api_version, Ordering::Release);
        store.api_changed.send_replace(api_version);
        // Deletions before this open are not known: watches start after them.
        store.forget_api_deletions(api_version);
        checkpoint::discard_partial(&store)?;
        Ok(store)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock_writer(&self) -> std::sync::MutexGuard<'_, WriterState> {
        // A panic while holding the lock leaves the counters valid; keep going.
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every node in the registry, by name.
    pub fn nodes(&self) -> Result<Vec<Node>, StoreError> {
        self.nodes
            .iter()
            .values()
            .map(|v| Ok(records::decode_node(&v?)?))
            .collect()
    }

    /// One node, if registered.
    pub fn node(&self, name: &str) -> Result<Option<Node>, StoreError> {
        self.nodes
            .get(name.as_bytes())?
            .map(|v| Ok(records::decode_node(&v)?))
            .transpose()
    }

    /// The newest seq written (durable or not).
    pub fn last_seq(&self) -> u64 {
        self.lock_writer().last_seq
    }

    /// The newest seq known to be on disk.
    pub fn durable_seq(&self) -> u64 {
        self.durable_seq.load(Ordering::Acquire)
    }

    /// Writes a batch in one transaction and returns its events with their
    /// seqs and its nodes with their new resource versions. Not durable
    /// until [`Store::flush`].
    pub fn write(&self, batch: Batch) -> Result<Written, StoreError> {
        Ok(self.write_all(vec![batch])?.pop().unwrap_or_default())
    }

    /// Writes batches in one transaction, each as [`Store::write`] would
    /// have written it after the ones before it (its own time, the next
    /// seqs): thousands of status changes that arrive together are one
    /// transaction, not thousands. All or none are written.
    pub fn write_all(&self, batches: Vec<Batch>) -> Result<Vec<Written>, StoreError> {
        let mut writer = self.lock_writer();
        let wanted: usize = batches.iter().map(|b| b.events.len()).sum();
        if (wanted as u64) > MAX_SEQ.saturating_sub(writer.last_seq) {
            return Err(StoreError::SeqExhausted {
                last: writer.last_seq,
                wanted: wanted as u64,
            });
        }
        let mut last_seq = writer.last_seq;
        let mut last_time = writer.last_time;
        let prepared: Vec<Prepared> = batches
            .into_iter()
            .map(|batch| {
                let p = Prepared::of(batch, last_seq, last_time);
                if !p.is_empty() {
                    last_seq += p.written.events.len() as u64;
                    last_time = p.effective_time;
                }
                p
            })
            .collect();
        if prepared.iter().all(|p| p.is_empty()) {
            return Ok(prepared.into_iter().map(|p| p.written).collect());
        }
        let new_conditions = self.new_conditions(&prepared);
        let work = self.outbox_work(&prepared);
        let node_runs = node_index::runs(prepared.iter().flat_map(|p| &p.written.events));
        (
            &self.nodes,
            &self.events,
            &self.node_events,
            &self.event_times,
            &self.condition_types,
            &self.outbox,
        )
            .transaction(|(nodes, log, index, times, conditions, outbox)| {
                for (key, (seq, reason, queued_at)) in &work {
                    // Keep when the oldest change still waiting was queued.
                    let enqueued = outbox
                        .get(key)?
                        .and_then(|old| records::decode_outbox_entry(&old).ok())
                        .map_or(*queued_at, |old| old.enqueued);
                    let entry = OutboxEntry {
                        seq: *seq,
                        enqueued,
                        reason: reason.clone(),
                    };
                    outbox.insert(key.as_slice(), records::encode_outbox_entry(&entry))?;
                }
                let mut first = true;
                for p in &prepared {
                    for (name, bytes) in &p.encoded_nodes {
                        nodes.insert(name.as_bytes(), bytes.as_slice())?;
                    }
                    for name in &p.written.deleted {
                        nodes.remove(name.as_bytes())?;
                    }
                    for (e, bytes) in p.written.events.iter().zip(&p.encoded_events) {
                        log.insert(&e.seq.to_be_bytes(), bytes.as_slice())?;
                        if time_index::indexed(e.seq, first) {
                            times.insert(&time_key(p.effective_time, e.seq), &[] as &[u8])?;
                        }
                        first = false;
                    }
                }
                for (node, (seq, len)) in &node_runs {
                    index.insert(index_key(node, *seq), node_index::run_value(*len))?;
                }
                for condition in &new_conditions {
                    conditions.insert(condition.as_bytes(), &[] as &[u8])?;
                }
                Ok::<_, ConflictableTransactionError<StoreError>>(())
            })?;
        writer.last_seq = last_seq;
        writer.last_time = last_time;
        if !new_conditions.is_empty() {
            self.conditions_seen
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .extend(new_conditions.iter().map(|c| c.to_string()));
        }
        // A node's objects go with it (durable with the same flush).
        for name in prepared.iter().flat_map(|p| &p.written.deleted) {
            self.delete_objects_of(name)?;
        }
        Ok(prepared.into_iter().map(|p| p.written).collect())
    }

    /// The condition types `prepared` brings that the store has not seen yet.
    fn new_conditions<'a>(&self, prepared: &'a [Prepared]) -> BTreeSet<&'a str> {
        let seen = self
            .conditions_seen
            .read()
            .unwrap_or_else(|p| p.into_inner());
        prepared
            .iter()
            .flat_map(|p| &p.written.events)
            .filter_map(|e| match &e.kind {
                EventKind::ConditionChanged { condition, .. }
                    if !seen.contains(condition.as_str()) =>
                {
                    Some(condition.as_str())
                }
                _ => None,
            })
            .collect()
    }

    /// The mirror's work for these changes, coalesced per node: the newest
    /// seq wins, queued at its batch's time. None when nothing is mirrored.
    fn outbox_work(&self, prepared: &[Prepared]) -> OutboxWork {
        let mut work = OutboxWork::new();
        if self.mirroring.load(Ordering::Relaxed) {
            for p in prepared {
                for e in &p.written.events {
                    let Some(node) = &e.node else { continue };
                    for (key, reason) in OutboxKey::for_event(node, &e.kind) {
                        work.insert(key.encode(), (e.seq, reason, p.time));
                    }
                }
            }
        }
        work
    }

    /// Puts node records without events: heartbeat times that change no
    /// condition. Not durable until [`Store::flush`].
    pub fn put_quietly(&self, nodes: &[Node]) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for n in nodes {
            batch.insert(n.name.as_bytes(), records::encode_node(n));
        }
        Ok(self.nodes.apply_batch(batch)?)
    }

    /// Every stored node Lease.
    pub fn leases(&self) -> Result<Vec<Lease>, StoreError> {
        self.leases
            .iter()
            .values()
            .map(|v| Ok(records::decode_lease(&v?)?))
            .collect()
    }

    /// Stores leases (renewals are not history). Not durable until [`Store::flush`].
    pub fn put_leases(&self, leases: &[Lease]) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for l in leases {
            batch.insert(l.name.as_bytes(), records::encode_lease(l));
        }
        Ok(self.leases.apply_batch(batch)?)
    }

    /// Removes a node's lease, if it has one.
    pub fn delete_lease(&self, name: &str) -> Result<(), StoreError> {
        self.leases.remove(name.as_bytes())?;
        Ok(())
    }

    /// Every object kept with a node ([`NodeObject`]).
    pub fn node_objects(&self) -> Result<Vec<NodeObject>, StoreError> {
        self.node_objects
            .iter()
            .map(|entry| {
                let (key, bytes) = entry?;
                Ok(records::decode_node_object(&key, &bytes)?)
            })
            .collect()
    }

    /// Stores objects kept with nodes and removes others (their history is
    /// the events written beside them). Not durable until [`Store::flush`].
    pub fn write_node_objects(
        &self,
        put: &[NodeObject],
        deleted: &[ObjectKey],
    ) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for o in put {
            batch.insert(
                records::object_key(&o.key()),
                records::encode_node_object(o),
            );
        }
        for key in deleted {
            batch.remove(records::object_key(key));
        }
        Ok(self.node_objects.apply_batch(batch)?)
    }

    /// Removes every object kept with `node` (a node deleted).
    pub fn delete_objects_of(&self, node: &str) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for key in self
            .node_objects
            .scan_prefix(records::object_prefix(node))
            .keys()
        {
            batch.remove(key?);
        }
        Ok(self.node_objects.apply_batch(batch)?)
    }

    /// From now on, every change also queues its mirror work in the outbox.
    pub fn enable_outbox(&self) {
        self.mirroring.store(true, Ordering::Relaxed);
    }

    /// Queues work outside a change (a resync), keeping entries already
    /// queued. Not durable until [`Store::flush`].
    pub fn enqueue(&self, keys: &[OutboxKey], time: Micros) -> Result<usize, StoreError> {
        let seq = self.last_seq();
        let mut added = 0;
        for key in keys {
            let entry = OutboxEntry {
                seq,
                enqueued: time,
                reason: None,
            };
            let fresh = self
                .outbox
                .compare_and_swap(
                    key.encode(),
                    None as Option<&[u8]>,
                    Some(records::encode_outbox_entry(&entry)),
                )?
                .is_ok();
            added += usize::from(fresh);
        }
        Ok(added)
    }

    /// Every queued piece of mirror work, by kind and node.
    pub fn outbox(&self) -> Result<Vec<(OutboxKey, OutboxEntry)>, StoreError> {
        let mut out = Vec::new();
        for entry in self.outbox.iter() {
            let (key, bytes) = entry?;
            out.push(decode_outbox(&key, &bytes)?);
        }
        Ok(out)
    }

    /// One queued piece of work.
    pub fn outbox_entry(&self, key: &OutboxKey) -> Result<Option<OutboxEntry>, StoreError> {
        self.outbox
            .get(key.encode())?
            .map(|v| Ok(records::decode_outbox_entry(&v)?))
            .transpose()
    }

    pub fn outbox_len(&self) -> usize {
        self.outbox.len()
    }

    /// Removes an entry the mirror finished, unless a newer change (a higher
    /// seq) was queued meanwhile: then the entry stays for another round.
    /// Returns whether it was removed. Not durable until the next flush; a
    /// crash before that redoes the work, which is idempotent.
    pub fn outbox_done(&self, key: &OutboxKey, seq: u64) -> Result<bool, StoreError> {
        let raw = key.encode();
        // A concurrent writer can only replace the entry with a newer one;
        // two rounds settle it.
        for _ in 0..3 {
            let Some(current) = self.outbox.get(&raw)? else {
                return Ok(false);
            };
            if records::decode_outbox_entry(&current)?.seq != seq {
                return Ok(false);
            }
            if self
                .outbox
                .compare_and_swap(&raw, Some(current), None as Option<&[u8]>)?
                .is_ok()
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Makes everything written so far durable; returns the seq now durable.
    pub async fn flush(&self) -> Result<u64, StoreError> {
        let upto = self.last_seq();
        self.db.flush_async().await?;
        self.durable_seq.fetch_max(upto, Ordering::AcqRel);
        Ok(upto)
    }

    /// [`Store::flush`] for callers outside an async runtime.
    pub fn flush_blocking(&self) -> Result<u64, StoreError> {
        let upto = self.last_seq();
        self.db.flush()?;
        self.durable_seq.fetch_max(upto, Ordering::AcqRel);
        Ok(upto)
    }

    /// One event, by seq.
    pub fn event(&self, seq: u64) -> Result<Option<Event>, StoreError> {
        if seq <= self.horizon() {
            return Ok(None);
        }
        self.events
            .get(seq.to_be_bytes())?
            .map(|bytes| Ok(records::decode_event(seq, &bytes)?))
            .transpose()
    }

    /// The newest durable event, if any.
    pub fn last_event(&self) -> Result<Option<Event>, StoreError> {
        let last = self.events_in(..=self.durable_seq()).next_back();
        Ok(last.transpose()?.map(|(event, _)| event))
    }

    /// The instance id of the controller that last opened the store for writing.
    pub fn last_instance(&self) -> Result<Option<String>, StoreError> {
        Ok(self
            .meta
            .get(META_INSTANCE)?
            .map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    /// When the last controller stopped cleanly; `None` if it did not (or never ran).
    pub fn last_clean_stop(&self) -> Result<Option<Micros>, StoreError> {
        Ok(self
            .meta
            .get(META_CLEAN_STOP)?
            .and_then(|v| Some(Micros(i64::from_be_bytes(v.as_ref().try_into().ok()?)))))
    }

    /// Records a controller start: instance id in meta, clean-stop marker cleared.
    pub fn mark_started(&self, instance: &str) -> Result<(), StoreError> {
        self.meta.insert(META_INSTANCE, instance.as_bytes())?;
        self.meta.remove(META_CLEAN_STOP)?;
        Ok(())
    }

    /// A value kept in the meta tree (under a key nodekeeper chose).
    pub fn meta_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.meta.get(key)?.map(|v| v.to_vec()))
    }

    /// Keeps a value in the meta tree. Not durable until [`Store::flush`].
    pub fn meta_put(&self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.meta.insert(key, value)?;
        Ok(())
    }

    /// Records a clean stop at `time`.
    pub fn mark_clean_stop(&self, time: Micros) -> Result<(), StoreError> {
        self.meta.insert(META_CLEAN_STOP, &time.0.to_be_bytes())?;
        Ok(())
    }

    /// The seq the kept history starts after (0 while nothing was pruned).
    pub fn horizon(&self) -> u64 {
        self.guard.horizon()
    }

    fn read_horizon(&self) -> Result<u64, StoreError> {
        Ok(self
            .meta
            .get(META_HORIZON)?
            .and_then(|v| Some(u64::from_be_bytes(v.as_ref().try_into().ok()?)))
            .unwrap_or(0))
    }

    /// Facts for `db status`: counts and sizes come from one pass over each tree.
    pub fn status(&self) -> Result<StoreStatus, StoreError> {
        let horizon = self.horizon();
        let first = self.events_in(horizon + 1..).next().transpose()?;
        let first_event = first.map(|(event, _)| event.time);
        let mut trees = Vec::new();
        let mut kept_events = 0usize;
        for (name, tree) in self.named_trees() {
            let (mut records, mut bytes) = (0u64, 0u64);
            for entry in tree.iter() {
                let (k, v) = entry?;
                records += 1;
                bytes += (k.len() + v.len()) as u64;
                // Events at or before the horizon that are still being deleted do not count.
                if name == trees::EVENTS && seq_from_key(&k)? > horizon {
                    kept_events += 1;
                }
            }
            trees.push(TreeSize {
                name: name.to_string(),
                records,
                bytes,
            });
        }
        let count = |name: &str| {
            trees
                .iter()
                .find(|t| t.name == name)
                .map_or(0, |t| t.records as usize)
        };
        let checkpoints = self.checkpoints_kept()?;
        Ok(StoreStatus {
            path: self.origin().to_path_buf(),
            schema_version: migrations::schema_version(&self.db)?.unwrap_or(0),
            nodes: count(trees::NODES),
            events: kept_events,
            outbox: count(trees::OUTBOX),
            last_seq: self.last_seq(),
            first_event,
            last_event: self.last_event()?.map(|e| e.time),
            size_on_disk: self.db.size_on_disk()?,
            last_instance: self.last_instance()?,
            last_clean_stop: self.last_clean_stop()?,
            horizon: checkpoints.iter().find(|c| c.seq == horizon).cloned(),
            checkpoints,
            trees,
            retention: self.retention_status(),
        })
    }

    /// Every tree with its name, for status and maintenance.
    fn named_trees(&self) -> [(&'static str, &sled::Tree); 12] {
        [
            (trees::NODES, &self.nodes),
            (trees::EVENTS, &self.events),
            (trees::NODE_EVENTS, &self.node_events),
            (trees::EVENT_TIMES, &self.event_times),
            (trees::CONDITION_TYPES, &self.condition_types),
            (trees::CHECKPOINTS, &self.checkpoints),
            (trees::CHECKPOINT_NODES, &self.checkpoint_nodes),
            (trees::OUTBOX, &self.outbox),
            (trees::LEASES, &self.leases),
            (trees::NODE_OBJECTS, &self.node_objects),
            (trees::API_OBJECTS, &self.api_objects),
            (trees::META, &self.meta),
        ]
    }

    /// Reads every record and checks that the registry agrees with its
    /// history (replayed from the horizon's checkpoint) and that every index
    /// agrees with the log. Over 80 lines: one pass over the log checks each
    /// event against both indexes and the checkpoints as the replay reaches
    /// them, so the history is read once.
    pub fn verify(&self) -> Result<VerifyReport, StoreError> {
        let mut report = VerifyReport::default();
        let horizon = self.horizon();
        let mut replayed = crate::history::Replay::from_nodes(if horizon == 0 {
            Default::default()
        } else {
            match self.checkpoint(horizon)? {
                Some(_) => self.checkpoint_registry(horizon)?,
                None => {
                    report.problems.push(format!(
                        "the history is pruned up to seq {horizon} but there is no checkpoint at it"
                    ));
                    Default::default()
                }
            }
        });
        let mut due: std::collections::VecDeque<Checkpoint> = self
            .checkpoints_kept()?
            .into_iter()
            .filter(|c| c.seq > horizon)
            .collect();
        // The time index is checked from the first kept event, which may be
        // below the horizon while a reader holds it.
        let mut times = time_index::Check::new(self.event_times.iter().keys());
        for entry in self.events.range(..=horizon.to_be_bytes()) {
            let (key, bytes) = entry?;
            if let Ok(seq) = seq_from_key(&key) {
                let time = records::decode_event(seq, &bytes).ok().map(|e| e.time.0);
                times.event(seq, time, &mut report.problems)?;
            }
        }
        for entry in self.events.range((horizon + 1).to_be_bytes()..) {
            let (key, bytes) = entry?;
            report.events += 1;
            let seq = match seq_from_key(&key) {
                Ok(seq) => seq,
                Err(e) => {
                    report.problems.push(e.to_string());
                    continue;
                }
            };
            match records::decode_event(seq, &bytes) {
                Ok(event) => {
                    if let Some(node) = &event.node {
                        match self.node_index_has(node, seq) {
                            Ok(true) => {}
                            Ok(false) => report.problems.push(format!(
                                "event {seq} is missing from the index of node {node}"
                            )),
                            Err(e) => report.problems.push(e.to_string()),
                        }
                    }
                    times.event(seq, Some(event.time.0), &mut report.problems)?;
                    replayed.apply(&event);
                    while due.front().is_some_and(|c| c.seq <= seq) {
                        let c = due.pop_front().expect("checked above");
                        if self.checkpoint_registry(c.seq)? != *replayed.nodes() {
                            report.problems.push(format!(
                                "the checkpoint at seq {} disagrees with the history replayed up to it",
                                c.seq
                            ));
                        }
                    }
                }
                Err(e) => {
                    times.event(seq, None, &mut report.problems)?;
                    report.problems.push(e.to_string());
                }
            }
        }
        let stored = self.verify_records(horizon, &mut report)?;
        report.problems.extend(checkpoint::verify_counts(self)?);
        report
            .problems
            .extend(crate::history::compare(&stored, replayed.nodes()));
        Ok(report)
    }

    /// The rest of [`Store::verify`]: the node index points only at events
    /// that exist, and every registry, outbox and lease record decodes.
    /// Returns the registry as stored.
    fn verify_records(
        &self,
        horizon: u64,
        report: &mut VerifyReport,
    ) -> Result<std::collections::BTreeMap<String, Node>, StoreError> {
        for entry in self.node_events.iter() {
            let (key, value) = entry?;
            let (first, len) = match node_index::parse_run(&key, &value) {
                Ok(run) => run,
                Err(e) => {
                    report.problems.push(e.to_string());
                    continue;
                }
            };
            for seq in first.max(horizon + 1)..first.saturating_add(len) {
                if !self.events.contains_key(seq.to_be_bytes())? {
                    report.problems.push(format!(
                        "the node index points at event {seq}, which does not exist"
                    ));
                }
            }
        }
        let mut stored = std::collections::BTreeMap::new();
        for entry in self.nodes.iter() {
            let (key, bytes) = entry?;
            report.nodes += 1;
            match records::decode_node(&bytes) {
                Ok(node) if node.name.as_bytes() != key.as_ref() => report.problems.push(format!(
                    "node record under key {:?} is named {:?}",
                    String::from_utf8_lossy(&key),
                    node.name
                )),
                Ok(node) => {
                    stored.insert(node.name.clone(), node);
                }
                Err(e) => report.problems.push(e.to_string()),
            }
        }
        for entry in self.outbox.iter() {
            let (key, bytes) = entry?;
            if let Err(e) = decode_outbox(&key, &bytes) {
                report.problems.push(e.to_string());
            }
        }
        for entry in self.leases.iter() {
            let (_, bytes) = entry?;
            if let Err(e) = records::decode_lease(&bytes) {
                report.problems.push(e.to_string());
            }
        }
        for entry in self.node_objects.iter() {
            let (key, bytes) = entry?;
            if let Err(e) = records::decode_node_object(&key, &bytes) {
                report.problems.push(e.to_string());
            }
        }
        Ok(stored)
    }

    /// Writes every record as JSON lines (see [`exchange`]).
    pub fn export(&self, out: &mut dyn std::io::Write) -> Result<ExportSummary, StoreError> {
        Ok(self.export_format(out, EXPORT_FORMAT_VERSION)?.0)
    }

    /// The store in export format `version` (1 to [`EXPORT_FORMAT_VERSION`]),
    /// for a release that reads only that (see [`exchange::export`]);
    /// returns what it wrote and what the format has no place for.
    pub fn export_format(
        &self,
        out: &mut dyn std::io::Write,
        version: u32,
    ) -> Result<(ExportSummary, ExportSummary), StoreError> {
        exchange::export(self, out, None, version)
    }

    /// A consistent snapshot of a store that is being written, in the
    /// export format: everything as of the durable seq `seq` (the newest
    /// when it is larger), streamed while writes go on. Returns what it
    /// wrote and the seq it is as of.
    pub fn export_at(
        &self,
        seq: u64,
        out: &mut dyn std::io::Write,
    ) -> Result<(ExportSummary, u64), StoreError> {
        let at = seq.min(self.durable_seq());
        let (written, _) = exchange::export(self, out, Some(at), EXPORT_FORMAT_VERSION)?;
        Ok((written, at))
    }

    /// Loads an export into this (empty) store and flushes it.
    pub fn import(&self, input: &mut dyn std::io::BufRead) -> Result<ImportSummary, StoreError> {
        exchange::import(self, input, &mut |_| {})
    }

    /// [`Store::import`], telling `progress` how far it got as it goes.
    pub fn import_reporting(
        &self,
        input: &mut dyn std::io::BufRead,
        progress: &mut dyn FnMut(ImportProgress),
    ) -> Result<ImportSummary, StoreError> {
        exchange::import(self, input, progress)
    }

    /// Closes the store and opens it once more, so that sled writes down
    /// where its log stands (its recovery snapshot, which sled writes only
    /// while opening a store). Without it the next open re-reads every byte
    /// written since this store was opened: after an import or a compaction,
    /// the whole store, seconds for a long history, paid by the first
    /// reader or the controller's restart.
    pub fn close_settled(self) -> Result<(), StoreError> {
        let path = self.path.clone();
        drop(self);
        let reopened = open_when_released(
            &path,
            &StoreOptions {
                cache_capacity: 16 << 20,
                ..StoreOptions::default()
            },
        )?;
        drop(reopened);
        Ok(())
    }

    /// Size of the store on disk, in bytes.
    pub fn size_on_disk(&self) -> u64 {
        self.db.size_on_disk().unwrap_or(0)
    }

    fn is_empty(&self) -> bool {
        self.nodes.is_empty()
            && self.events.is_empty()
            && self.outbox.is_empty()
            && self.leases.is_empty()
            && self.node_objects.is_empty()
            && self.api_objects.is_empty()
            && self.checkpoints.is_empty()
    }

    /// Empties every tree but the schema version and creation time (a failed import).
    fn clear(&self) -> Result<(), StoreError> {
        for (name, tree) in self.named_trees() {
            if name != trees::META {
                tree.clear()?;
            }
        }
        for key in [META_HORIZON, META_INSTANCE, META_CLEAN_STOP] {
            self.meta.remove(key)?;
        }
        *self.lock_writer() = WriterState {
            last_seq: 0,
            last_time: i64::MIN,
        };
        self.conditions_seen
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.guard.set_horizon(0);
        self.durable_seq.store(0, Ordering::Release);
        self.api_versions.store(0, Ordering::Release);
        self.forget_api_deletions(0);
        self.db.flush()?;
        Ok(())
    }
}

fn decode_outbox(key: &[u8], bytes: &[u8]) -> Result<(OutboxKey, OutboxEntry), StoreError> {
    let Some(key) = OutboxKey::decode(key) else {
        return Err(StoreError::Decode(DecodeError {
            what: "an outbox key".into(),
            reason: format!("{key:?} is not a kind and a node name"),
        }));
    };
    Ok((key, records::decode_outbox_entry(bytes)?))
}

fn seq_from_key(key: &[u8]) -> Result<u64, StoreError> {
    let raw: [u8; 8] = key.try_into().map_err(|_| {
        StoreError::Decode(DecodeError {
            what: "an event key".into(),
            reason: format!("{} bytes, not 8", key.len()),
        })
    })?;
    Ok(u64::from_be_bytes(raw))
}

impl Store {
    /// The events whose seqs are in `seqs`, decoded, each with the length
    /// of its record; a record that does not decode is an error.
    fn events_in(
        &self,
        seqs: impl std::ops::RangeBounds<u64>,
    ) -> impl DoubleEndedIterator<Item = Result<(Event, usize), StoreError>> {
        let key = |b: std::ops::Bound<&u64>| b.map(|seq| seq.to_be_bytes());
        let range = (key(seqs.start_bound()), key(seqs.end_bound()));
        self.events.range(range).map(|entry| {
            let (key, bytes) = entry?;
            let event = records::decode_event(seq_from_key(&key)?, &bytes)?;
            Ok((event, bytes.len()))
        })
    }
}

/// Opens a store this process just closed: sled lets go of its lock a
/// moment after the close (a bounded wait).
// Maintenance commands call this on a stopped store, outside any runtime:
// a real-time wait in that thread stalls nothing else.
#[allow(clippy::disallowed_methods, clippy::disallowed_types)]
pub(crate) fn open_when_released(path: &Path, options: &StoreOptions) -> Result<Store, StoreError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match Store::open(path, options) {
            Err(StoreError::Locked { .. }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            other => return other,
        }
    }
}

fn classify_open_error(path: &Path, source: sled::Error) -> StoreError {
    if let sled::Error::Io(io) = &source {
        let text = io.to_string();
        if io.kind() == std::io::ErrorKind::WouldBlock || text.contains("lock") {
            return StoreError::Locked {
                path: path.to_path_buf(),
            };
        }
    }
    StoreError::Open {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_history;
#[cfg(test)]
mod tests_node_index;
#[cfg(test)]
mod tests_time_index;
