//! Export and import as JSON lines, independent of sled and of the schema.
//! Both stream: memory stays flat whatever the history's length.
//!
//! Format 3, one JSON object per line, each line one record kind:
//!
//! | line | what |
//! |---|---|
//! | `{"format":"nodekeeper-export","version":3,"exportedAt":T,"lastSeq":N,"horizon":{"seq":H,"time":T}}` | the header; `horizon` only when the history was pruned |
//! | `{"meta":{"created":T,"instance":ID,"lastCleanStop":T,"other":{KEY:VALUE}}}` | the store's identity: when it was made, the last controller, its clean stop; and every other value it keeps (the mirror's last error) |
//! | `{"node":NODE}` | a registry record (the domain's node, as `/v1/nodes` shows it) |
//! | `{"lease":LEASE}` | a node Lease (`kube-node-lease`) |
//! | `{"nodeObject":{"node":NAME,"resource":R,"name":N,"generation":G,"json":TEXT}}` | an object a node's kubelet keeps (its CSINode) |
//! | `{"outbox":{"kind":"Node"\|"EvictPods","node":NAME,"seq":N,"enqueued":T,"reason":R}}` | mirror work not yet done |
//! | `{"checkpointNode":NODE}` | the registry as of the horizon, one node a line |
//! | `{"event":EVENT}` | one event of the kept history, oldest first (as `history -o json`) |
//! | `{"end":{"nodes":N,"leases":N,"nodeObjects":N,"outbox":N,"checkpointNodes":N,"events":N}}` | the counts: an export without it is incomplete and is refused |
//!
//! Format 2 is format 3 without `apiObject` lines, `CertificateIssued`
//! events, Leases' `ownerReferences` and nodes' `reported` (images, the
//! kubelet's port, runtime handlers, features, volumes): what schema 6 keeps. It is still
//! read, and written by `db export --format-version 2`, which leaves those
//! out and says how many.
//!
//! Format 1 (a header with `nodes` and `events` counts, then `node` and
//! `event` lines) is still read; its history is taken to start from an empty
//! registry before its first event.
//!
//! Export and import share the line types above, so a change to the format
//! is made to both at once.

use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write};

use migrations::v2_node_index::index_key;
use migrations::v4_history_index::{checkpoint_node_key, time_key};
use serde::{Deserialize, Serialize};

use super::checkpoint::{Checkpoint, Follower};
use super::{
    records, ApiObject, OutboxEntry, OutboxKey, Store, StoreError, WriterState, MAX_SEQ,
    META_CLEAN_STOP, META_CREATED, META_HORIZON, META_IMPORT_INCOMPLETE, META_INSTANCE,
};
use crate::model::{Event, EventKind, Lease, Micros, Node, NodeObject};

const FORMAT: &str = "nodekeeper-export";
/// The export format this build writes (and the newest it reads).
pub const EXPORT_FORMAT_VERSION: u32 = 3;
/// Records loaded between flushes, so an import's writes reach the disk as
/// it goes rather than all at its end.
const FLUSH_LINES: usize = 100_000;
/// The longest line an import reads. The largest record an export writes
/// is an event carrying two versions of a node's fields (an operator's
/// change), each under [`crate::model::validation::MAX_NODE_BYTES`] as
/// JSON: about 2 MiB. A longer line is refused as soon as this much of it
/// is read, so memory stays bounded whatever the input.
pub const MAX_LINE_BYTES: usize = 8 << 20;
/// Records loaded between two reports of an import's progress.
const PROGRESS_LINES: usize = 1024;

/// How far an import (or the import half of a compaction) got, for a
/// command to show on a terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportProgress {
    /// Records loaded so far, and how many the export's header announces
    /// (its events, and for format 1 its nodes), when it does.
    Loading {
        records: usize,
        expected: Option<usize>,
    },
    /// Every record is loaded (this many); they are being written to disk.
    Writing { records: usize },
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Header {
    format: String,
    version: u32,
    exported_at: Micros,
    last_seq: u64,
    /// Format 1: the counts, up front.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nodes: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    events: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    horizon: Option<HorizonLine>,
}

impl Header {
    /// How many records the header says follow: its counts (format 1), or
    /// the events between its horizon and its last seq (format 2, whose
    /// nodes and leases are not counted until its end line).
    fn expected_records(&self) -> Option<usize> {
        match (self.nodes, self.events) {
            (Some(nodes), Some(events)) => nodes.checked_add(events),
            _ => {
                let from = self.horizon.as_ref().map_or(0, |h| h.seq);
                usize::try_from(self.last_seq.saturating_sub(from)).ok()
            }
        }
    }
}

#[derive(Serialize, Deserialize)]
struct HorizonLine {
    seq: u64,
    time: Micros,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct MetaLine {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    created: Option<Micros>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    instance: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_clean_stop: Option<Micros>,
    /// Every other value kept in the meta tree (the mirror's last error...),
    /// by key: its text, or `hex:` and its bytes when it is not UTF-8.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    other: BTreeMap<String, String>,
}

/// Meta keys an export does not carry as such: the schema is the importing
/// store's, the horizon is in the header, the rest is transient.
const META_NOT_EXPORTED: &[&[u8]] = &[
    migrations::SCHEMA_VERSION_KEY,
    META_HORIZON,
    META_IMPORT_INCOMPLETE,
    b"checkpoint_in_progress",
    META_CREATED,
    META_INSTANCE,
    META_CLEAN_STOP,
];

#[derive(Serialize, Deserialize)]
struct OutboxLine {
    kind: String,
    node: String,
    seq: u64,
    enqueued: Micros,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

/// What an export holds, counted by record kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    pub nodes: usize,
    pub leases: usize,
    /// Exports made before node objects were kept have none.
    #[serde(default)]
    pub node_objects: usize,
    /// Exports made before API objects were kept have none.
    #[serde(default)]
    pub api_objects: usize,
    pub outbox: usize,
    pub checkpoint_nodes: usize,
    pub events: usize,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Line {
    Meta(MetaLine),
    Node(Box<Node>),
    Lease(Box<Lease>),
    NodeObject(NodeObject),
    ApiObject(ApiObject),
    Outbox(OutboxLine),
    CheckpointNode(Box<Node>),
    Event(Box<Event>),
    End(Counts),
}

/// What an export wrote.
pub type ExportSummary = Counts;

/// What an import loaded.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportSummary {
    #[serde(flatten)]
    pub counts: Counts,
    pub last_seq: u64,
    /// Where its kept history starts (0: from the first event).
    pub horizon: u64,
    /// Checkpoints written along the way (the horizon's included).
    pub checkpoints: usize,
}

fn write_line(out: &mut dyn Write, value: &impl Serialize) -> Result<(), StoreError> {
    serde_json::to_writer(&mut *out, value)
        .map_err(|e| StoreError::Export(std::io::Error::other(e)))?;
    out.write_all(b"\n").map_err(StoreError::Export)
}

/// The store's identity and every other value it keeps, as the meta line:
/// text as it is, anything else (or text that looks like hex) as `hex:…`.
fn meta_line(store: &Store) -> Result<MetaLine, StoreError> {
    let micros = |key: &[u8]| -> Result<Option<Micros>, StoreError> {
        Ok(store
            .meta
            .get(key)?
            .and_then(|v| Some(Micros(i64::from_be_bytes(v.as_ref().try_into().ok()?)))))
    };
    let mut other = BTreeMap::new();
    for entry in store.meta.iter() {
        let (key, value) = entry?;
        if META_NOT_EXPORTED.contains(&key.as_ref()) {
            continue;
        }
        let value = match std::str::from_utf8(&value) {
            Ok(text) if !text.starts_with("hex:") => text.to_string(),
            _ => format!(
                "hex:{}",
                value.iter().map(|b| format!("{b:02x}")).collect::<String>()
            ),
        };
        other.insert(String::from_utf8_lossy(&key).into_owned(), value);
    }
    Ok(MetaLine {
        created: micros(META_CREATED)?,
        instance: store.last_instance()?,
        last_clean_stop: micros(META_CLEAN_STOP)?,
        other,
    })
}

/// Writes the whole store to `out` as JSON lines in format `version` (see
/// the module docs); returns what it wrote and what that format has no
/// place for. `at`: a consistent snapshot as of that durable seq of a
/// store that is being written (a running controller's, see
/// [`Store::export_at`]); `None`: the store as it is, which nothing writes.
///
/// Format 2 is what schema 6's releases read: format 3 without API
/// objects, `CertificateIssued` events, Leases' owners and nodes'
/// `reported`. Format 1 is what releases before format 2 read: a header
/// with the counts, the registry, then the history. It has no horizon (its
/// history starts from an empty registry), no Leases, outbox or meta: a
/// store whose history was pruned is refused, and the rest is left out.
pub(super) fn export(
    store: &Store,
    out: &mut dyn Write,
    at: Option<u64>,
    version: u32,
) -> Result<(ExportSummary, Counts), StoreError> {
    if !(1..=EXPORT_FORMAT_VERSION).contains(&version) {
        return Err(StoreError::Export(std::io::Error::other(format!(
            "there is no export format {version}: this release writes formats 1 to \
             {EXPORT_FORMAT_VERSION}"
        ))));
    }
    let (v1, v2) = (version == 1, version == 2);
    let mut left_out = Counts::default();
    // The history from the horizon on is held for the export's length: a
    // prune meanwhile waits for it (or, past the pin's time to live, is
    // found out at the end and fails the export rather than leave holes).
    let horizon = store.horizon();
    if v1 && horizon > 0 {
        return Err(StoreError::Export(std::io::Error::other(format!(
            "export format 1 holds the whole history from an empty registry, and this store's \
             history before seq {horizon} was pruned: a release that reads only format 1 cannot \
             take it; upgrade that release instead"
        ))));
    }
    let _pin = store.pin_history(horizon)?;
    let last_seq = at.map_or_else(|| store.last_seq(), |seq| seq.min(store.durable_seq()));
    let base = if horizon > 0 {
        store.checkpoint(horizon)?
    } else {
        None
    };
    write_line(
        out,
        &Header {
            format: FORMAT.into(),
            version,
            exported_at: Micros::now(),
            last_seq,
            // Format 1 gives its counts up front.
            nodes: v1.then(|| store.nodes.len()),
            events: v1.then(|| store.events.len()),
            horizon: (horizon > 0).then(|| HorizonLine {
                seq: horizon,
                time: base.as_ref().map_or(Micros(i64::MIN), |c| c.time),
            }),
        },
    )?;
    if !v1 {
        write_line(out, &Line::Meta(meta_line(store)?))?;
    }
    let mut counts = Counts::default();
    if at.is_some() {
        // The registry as its history has it at `last_seq` (the nearest
        // checkpoint and the events after it): records written since, and
        // heartbeat times kept without an event, are not in it.
        for node in store.registry_at(last_seq)?.nodes.into_values() {
            write_line(out, &Line::Node(Box::new(for_version(node, version))))?;
            counts.nodes += 1;
        }
    } else {
        for value in store.nodes.iter().values() {
            let node = records::decode_node(&value?)?;
            write_line(out, &Line::Node(Box::new(for_version(node, version))))?;
            counts.nodes += 1;
        }
    }
    if v1 {
        left_out.leases = store.leases.len();
        left_out.outbox = store.outbox.len();
    } else {
        let checkpoint = base.is_some().then_some(horizon);
        let counted = (&mut counts, &mut left_out);
        export_kept(store, out, version, last_seq, checkpoint, counted)?;
    }
    for entry in store.events_in(horizon + 1..=last_seq) {
        let (event, _) = entry?;
        if v2 && matches!(event.kind, EventKind::CertificateIssued { .. }) {
            left_out.events += 1;
            continue;
        }
        write_line(out, &Line::Event(Box::new(event)))?;
        counts.events += 1;
    }
    store.check_kept(horizon)?;
    if !v1 {
        write_line(out, &Line::End(counts.clone()))?;
    }
    out.flush().map_err(StoreError::Export)?;
    Ok((counts, left_out))
}

/// A node as export format `version` holds it: format 2 has no place for
/// what a kubelet reports beyond its conditions, addresses, capacity and
/// machine (the kubelet reports it again at its next status update).
fn for_version(mut node: Node, version: u32) -> Node {
    if version < 3 {
        node.reported = Default::default();
    }
    node
}

/// What formats 2 and 3 hold besides the registry and its history: the
/// Leases, the objects, the outbox up to `last_seq`, and the nodes of the
/// `checkpoint` at the horizon. Counts what it wrote and what it left out.
fn export_kept(
    store: &Store,
    out: &mut dyn Write,
    version: u32,
    last_seq: u64,
    checkpoint: Option<u64>,
    (counts, left_out): (&mut Counts, &mut Counts),
) -> Result<(), StoreError> {
    let v2 = version == 2;
    // Leases are renewals, not history: as they are when read.
    for value in store.leases.iter().values() {
        let mut lease = records::decode_lease(&value?)?;
        if v2 {
            // The kubelet sets its owner again at its next renewal.
            lease.owner_references.clear();
        }
        write_line(out, &Line::Lease(Box::new(lease)))?;
        counts.leases += 1;
    }
    for object in store.node_objects()? {
        write_line(out, &Line::NodeObject(object))?;
        counts.node_objects += 1;
    }
    for object in store.all_api_objects()? {
        if v2 {
            left_out.api_objects += 1;
            continue;
        }
        write_line(out, &Line::ApiObject(object))?;
        counts.api_objects += 1;
    }
    for entry in store.outbox.iter() {
        let (key, value) = entry?;
        let (key, entry) = super::decode_outbox(&key, &value)?;
        // Mirror work queued after the snapshot belongs to a later one.
        if entry.seq > last_seq {
            continue;
        }
        write_line(
            out,
            &Line::Outbox(OutboxLine {
                kind: key.kind().to_string(),
                node: key.node().to_string(),
                seq: entry.seq,
                enqueued: entry.enqueued,
                reason: entry.reason,
            }),
        )?;
        counts.outbox += 1;
    }
    if let Some(seq) = checkpoint {
        for value in store
            .checkpoint_nodes
            .scan_prefix(seq.to_be_bytes())
            .values()
        {
            let node = records::decode_node(&value?)?;
            write_line(
                out,
                &Line::CheckpointNode(Box::new(for_version(node, version))),
            )?;
            counts.checkpoint_nodes += 1;
        }
    }
    Ok(())
}

pub(super) fn import(
    store: &Store,
    input: &mut dyn BufRead,
    progress: &mut dyn FnMut(ImportProgress),
) -> Result<ImportSummary, StoreError> {
    if !store.is_empty() {
        return Err(StoreError::NotEmpty(store.path.clone()));
    }
    // Until the marker goes, every command refuses this store as incomplete.
    store.meta.insert(
        META_IMPORT_INCOMPLETE,
        format!("an import started at {}", Micros::now().rfc3339_seconds()).as_bytes(),
    )?;
    store.db.flush()?;
    match Loader::new(store).load(input, progress) {
        Ok(summary) => {
            store.meta.remove(META_IMPORT_INCOMPLETE)?;
            store.flush_blocking()?;
            Ok(summary)
        }
        Err(e) => {
            // The store was empty before; leave it so rather than half-loaded.
            store.clear()?;
            store.meta.remove(META_IMPORT_INCOMPLETE)?;
            store.db.flush()?;
            Err(e)
        }
    }
}

/// A record refused on a line [`Loader::load`] fills in.
fn refused(reason: impl Into<String>) -> StoreError {
    StoreError::Import {
        line: 0,
        reason: reason.into(),
    }
}

/// Why an export whose seqs reach past [`MAX_SEQ`] is refused: the store
/// could write nothing after it, and a seq that went on would wrap around.
fn past_max_seq(seq: u64) -> String {
    format!(
        "seq {seq} is past {MAX_SEQ}, the last seq a store can write (no seq could follow \
         it); this export was not made by `nodekeeper db export` from a working store"
    )
}

/// An import under way, and the registry followed from the horizon so
/// periodic checkpoints are written as the events go by.
///
/// Records go in one insert each, not in large `sled::Batch`es: sled hands
/// every page version a write replaces to crossbeam-epoch, which frees a few
/// bags of them each 128 times a thread pins, and a batch pins once for all
/// its writes. An import of 5,000-record batches outran it and held every
/// replaced page (7 GiB for 1M events); one pin per insert keeps the
/// garbage freed as fast as it is made.
struct Loader<'a> {
    store: &'a Store,
    since_flush: usize,
    counts: Counts,
    last_seq: u64,
    effective: i64,
    conditions: std::collections::BTreeSet<String>,
    horizon: Option<(u64, Micros)>,
    base: BTreeMap<String, Node>,
    follower: Option<Follower>,
    checkpoints: usize,
}

impl<'a> Loader<'a> {
    fn new(store: &'a Store) -> Loader<'a> {
        Loader {
            store,
            since_flush: 0,
            counts: Counts::default(),
            last_seq: 0,
            effective: i64::MIN,
            conditions: Default::default(),
            horizon: None,
            base: BTreeMap::new(),
            follower: None,
            checkpoints: 0,
        }
    }

    fn load(
        mut self,
        input: &mut dyn BufRead,
        progress: &mut dyn FnMut(ImportProgress),
    ) -> Result<ImportSummary, StoreError> {
        let mut raw = Vec::new();
        let mut number = 0usize;
        let mut header: Option<Header> = None;
        let mut expected = None;
        let mut end: Option<(usize, Counts)> = None;
        let mut loaded = 0usize;
        loop {
            raw.clear();
            // At most one byte past the limit: enough to tell a line is too long.
            let read = (&mut *input)
                .take(MAX_LINE_BYTES as u64 + 1)
                .read_until(b'\n', &mut raw)
                .map_err(|e| StoreError::Import {
                    line: number + 1,
                    reason: e.to_string(),
                })?;
            if read == 0 {
                break;
            }
            number += 1;
            let bad = |reason: String| StoreError::Import {
                line: number,
                reason,
            };
            let on_line = |e: StoreError| match e {
                StoreError::Import { reason, .. } => bad(reason),
                other => other,
            };
            if raw.strip_suffix(b"\n").unwrap_or(&raw).len() > MAX_LINE_BYTES {
                return Err(bad(format!(
                    "the line is longer than {} MiB, more than any record of an export takes, \
                     and was read no further: this is not a whole file made by `nodekeeper db \
                     export`",
                    MAX_LINE_BYTES >> 20
                )));
            }
            let line = std::str::from_utf8(&raw)
                .map_err(|e| bad(format!("the line is not UTF-8 text ({e})")))?;
            if line.trim().is_empty() {
                continue;
            }
            let Some(h) = &header else {
                let h = self.header(line).map_err(bad)?;
                expected = h.expected_records();
                header = Some(h);
                continue;
            };
            if let Some((at, _)) = end {
                return Err(bad(format!("a record after the end line (line {at})")));
            }
            let record: Line = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
            let v1 = h.version == 1;
            match record {
                Line::Node(node) => {
                    // Bounded as a write through the API is, whatever wrote the export.
                    let refused = crate::validation::node(&node);
                    if !refused.is_empty() {
                        return Err(bad(format!(
                            "{}; bring the node within bounds in the store it was exported from \
                             (`nodekeeper label {name} KEY-`, or kubectl) and export it again",
                            crate::validation::Invalid {
                                kind: "Node",
                                name: node.name.clone(),
                                causes: refused,
                            },
                            name = node.name,
                        )));
                    }
                    self.store
                        .nodes
                        .insert(node.name.as_bytes(), records::encode_node(&node))?;
                    self.counts.nodes += 1;
                }
                Line::Event(event) => self.event(*event).map_err(on_line)?,
                _ if v1 => return Err(bad("format 1 has only node and event lines".into())),
                Line::Meta(meta) => self.meta(meta).map_err(on_line)?,
                Line::Lease(lease) => {
                    self.store
                        .leases
                        .insert(lease.name.as_bytes(), records::encode_lease(&lease))?;
                    self.counts.leases += 1;
                }
                Line::NodeObject(object) => {
                    self.store.write_node_objects(&[object], &[])?;
                    self.counts.node_objects += 1;
                }
                Line::ApiObject(object) => {
                    self.store.restore_api_object(&object)?;
                    self.counts.api_objects += 1;
                }
                Line::Outbox(o) => self.outbox(o).map_err(on_line)?,
                Line::CheckpointNode(node) => self.checkpoint_node(*node).map_err(on_line)?,
                Line::End(counts) => {
                    end = Some((number, counts));
                    continue;
                }
            }
            self.since_flush += 1;
            if self.since_flush >= FLUSH_LINES {
                self.store.db.flush()?;
                self.since_flush = 0;
            }
            loaded += 1;
            if loaded.is_multiple_of(PROGRESS_LINES) {
                progress(ImportProgress::Loading {
                    records: loaded,
                    expected,
                });
            }
        }
        let Some(header) = header else {
            return Err(refused("the input is empty"));
        };
        self.check_counts(&header, end, number)?;
        progress(ImportProgress::Writing { records: loaded });
        self.finish(header.last_seq)
    }

    /// The header line: a format and version this build reads, and the horizon, if any.
    fn header(&mut self, line: &str) -> Result<Header, String> {
        let h: Header = serde_json::from_str(line).map_err(|e| {
            format!(
                "not a nodekeeper export header ({e}); was this made by `nodekeeper db export`?"
            )
        })?;
        let seqs = [Some(h.last_seq), h.horizon.as_ref().map(|h| h.seq)];
        if let Some(seq) = seqs.into_iter().flatten().find(|s| *s > MAX_SEQ) {
            return Err(past_max_seq(seq));
        }
        if h.format != FORMAT || h.version == 0 || h.version > EXPORT_FORMAT_VERSION {
            return Err(format!(
                "format {:?} version {} is not one this build reads ({FORMAT} 1 to {EXPORT_FORMAT_VERSION}); export with a build that matches, or upgrade this one",
                h.format, h.version
            ));
        }
        if let Some(horizon) = &h.horizon {
            self.horizon = Some((horizon.seq, horizon.time));
            self.last_seq = horizon.seq;
            self.effective = horizon.time.0;
        }
        Ok(h)
    }

    /// One piece of mirror work not yet done.
    fn outbox(&mut self, o: OutboxLine) -> Result<(), StoreError> {
        let key = match o.kind.as_str() {
            "Node" => OutboxKey::Node(o.node),
            "EvictPods" => OutboxKey::EvictPods(o.node),
            other => {
                return Err(refused(format!(
                    "outbox work of kind {other:?} is not one this build knows (Node, EvictPods)"
                )))
            }
        };
        let entry = OutboxEntry {
            seq: o.seq,
            enqueued: o.enqueued,
            reason: o.reason,
        };
        self.store
            .outbox
            .insert(key.encode(), records::encode_outbox_entry(&entry))?;
        self.counts.outbox += 1;
        Ok(())
    }

    /// One node of the registry as of the horizon, before the first event.
    fn checkpoint_node(&mut self, node: Node) -> Result<(), StoreError> {
        let Some((seq, _)) = self.horizon else {
            return Err(refused(
                "a checkpointNode line in an export without a horizon",
            ));
        };
        if self.follower.is_some() {
            return Err(refused("a checkpointNode line after the first event"));
        }
        self.store.checkpoint_nodes.insert(
            checkpoint_node_key(seq, &node.name),
            records::encode_node(&node),
        )?;
        self.base.insert(node.name.clone(), node);
        self.counts.checkpoint_nodes += 1;
        Ok(())
    }

    /// The records read against the counts the header (format 1) or the end
    /// line announces: a difference means the export was cut short.
    fn check_counts(
        &self,
        header: &Header,
        end: Option<(usize, Counts)>,
        number: usize,
    ) -> Result<(), StoreError> {
        let incomplete = |reason: String| StoreError::Import {
            line: number,
            reason: format!("{reason}: the export is incomplete (cut short?); export again"),
        };
        match (header.version, end) {
            (1, _) => {
                let want = (header.nodes.unwrap_or(0), header.events.unwrap_or(0));
                if (self.counts.nodes, self.counts.events) != want {
                    return Err(incomplete(format!(
                        "the header announces {} nodes and {} events, the file has {} and {}",
                        want.0, want.1, self.counts.nodes, self.counts.events
                    )));
                }
            }
            (_, None) => return Err(incomplete("no end line".into())),
            (_, Some((_, counts))) if counts != self.counts => {
                return Err(incomplete(format!(
                    "the end line counts {counts:?}, the file has {:?}",
                    self.counts
                )))
            }
            _ => {}
        }
        Ok(())
    }

    fn meta(&mut self, meta: MetaLine) -> Result<(), StoreError> {
        let meta_tree = &self.store.meta;
        if let Some(t) = meta.created {
            meta_tree.insert(META_CREATED, &t.0.to_be_bytes())?;
        }
        if let Some(instance) = meta.instance {
            meta_tree.insert(META_INSTANCE, instance.as_bytes())?;
        }
        if let Some(t) = meta.last_clean_stop {
            meta_tree.insert(META_CLEAN_STOP, &t.0.to_be_bytes())?;
        }
        for (key, value) in meta.other {
            if META_NOT_EXPORTED.contains(&key.as_bytes()) {
                continue;
            }
            let bytes = match value.strip_prefix("hex:") {
                Some(hex) => (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(hex.get(i..i + 2).unwrap_or("zz"), 16))
                    .collect::<Result<Vec<u8>, _>>()
                    .map_err(|_| refused(format!("meta value {key:?} is not hex after `hex:`")))?,
                None => value.into_bytes(),
            };
            meta_tree.insert(key.as_bytes(), bytes)?;
        }
        Ok(())
    }

    fn event(&mut self, event: Event) -> Result<(), StoreError> {
        if event.seq > MAX_SEQ {
            return Err(refused(past_max_seq(event.seq)));
        }
        if event.seq <= self.last_seq {
            return Err(refused(format!(
                "event seq {} does not follow {}",
                event.seq, self.last_seq
            )));
        }
        if self.follower.is_none() {
            // The first event: the registry before it is the horizon's
            // checkpoint, or (a log starting late, format 1) an empty one.
            let (seq, time) = match self.horizon {
                Some(h) => h,
                None if event.seq > 1 => {
                    let h = (event.seq - 1, event.time);
                    self.horizon = Some(h);
                    h
                }
                None => (0, Micros(i64::MIN)),
            };
            self.follower = Some(Follower::at(
                self.store,
                seq,
                time,
                std::mem::take(&mut self.base),
            ));
        }
        self.last_seq = event.seq;
        self.effective = self.effective.max(event.time.0);
        let s = self.store;
        let record = records::encode_event(&event);
        if let Some(node) = &event.node {
            s.node_events
                .insert(index_key(node, event.seq), &[] as &[u8])?;
        }
        if let EventKind::ConditionChanged { condition, .. } = &event.kind {
            self.conditions.insert(condition.clone());
        }
        // The first event loaded starts the (sparse) time index.
        if super::time_index::indexed(event.seq, self.counts.events == 0) {
            s.event_times
                .insert(&time_key(self.effective, event.seq)[..], &[] as &[u8])?;
        }
        let len = record.len();
        s.events.insert(event.seq.to_be_bytes(), record)?;
        self.counts.events += 1;
        let due = {
            let follower = self.follower.as_mut().expect("set above");
            follower.apply(&event, len);
            follower.due()
        };
        if due {
            self.follower
                .as_mut()
                .expect("set above")
                .write(self.store)?;
            self.checkpoints += 1;
        }
        Ok(())
    }

    fn finish(mut self, header_last_seq: u64) -> Result<ImportSummary, StoreError> {
        let s = self.store;
        let horizon = self.horizon.map_or(0, |(seq, _)| seq);
        if let Some((seq, time)) = self.horizon {
            // The horizon's checkpoint: its nodes are in; the header makes it whole.
            let nodes = s.checkpoint_registry(seq)?;
            let node_bytes = nodes
                .values()
                .map(|n| (8 + n.name.len() + records::encode_node(n).len()) as u64)
                .sum();
            s.checkpoints.insert(
                seq.to_be_bytes(),
                super::checkpoint::encode_checkpoint(&Checkpoint {
                    nodes: nodes.len() as u64,
                    node_bytes,
                    ..Checkpoint::at(seq, time)
                }),
            )?;
            s.meta.insert(META_HORIZON, &seq.to_be_bytes())?;
            self.checkpoints += 1;
        }
        for condition in &self.conditions {
            s.condition_types
                .insert(condition.as_bytes(), &[] as &[u8])?;
        }
        let last_seq = self.last_seq.max(header_last_seq).max(horizon);
        *s.lock_writer() = WriterState {
            last_seq,
            last_time: self.effective,
        };
        s.guard.set_horizon(horizon);
        s.conditions_seen
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .extend(self.conditions.iter().cloned());
        Ok(ImportSummary {
            counts: self.counts,
            last_seq,
            horizon,
            checkpoints: self.checkpoints,
        })
    }
}
