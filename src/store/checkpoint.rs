//! Checkpoints: the registry as its history describes it at a seq, kept so
//! that `at`, watches and retention start from the nearest one and replay
//! forward, instead of replaying from the first event ever written.
//!
//! A checkpoint is its nodes (`checkpoint_nodes`, under the checkpoint's seq)
//! and a header (`checkpoints`) written after them: a checkpoint without a
//! header is incomplete and is discarded. One is written every
//! [`interval_for`] events; the oldest one kept is the *horizon*, the
//! registry as of the first event retention pruned.

use std::collections::BTreeMap;

use migrations::v4_history_index::checkpoint_node_key;
use serde::{Deserialize, Serialize};

use super::records::{self, DecodeError};
use super::{seq_from_key, Store, StoreError};
use crate::history::Replay;
use crate::model::{Event, Micros, Node};

/// Checkpoints are at least this many events apart.
pub const MIN_INTERVAL: u64 = 10_000;
/// ... and at least this many events per node apart, so that checkpoints
/// never take more than a fraction of what the events they skip take.
pub const EVENTS_PER_NODE: u64 = 5;
/// Node records written in one sled batch: each batch briefly holds every
/// other writer off, so they stay small.
const WRITE_CHUNK: usize = 256;
/// Present while a checkpoint is being written: its seq.
const META_IN_PROGRESS: &[u8] = b"checkpoint_in_progress";

/// How many events apart checkpoints are for a registry of `nodes` nodes.
pub fn interval_for(nodes: usize) -> u64 {
    MIN_INTERVAL.max(EVENTS_PER_NODE * nodes as u64)
}

/// A kept checkpoint: the registry as of `seq`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    pub seq: u64,
    /// The effective time of the event at `seq` (see [`super::HistoryQuery::since`]).
    pub time: Micros,
    /// The nodes registered as of `seq`.
    pub nodes: u64,
    /// What its node records take (keys and values).
    pub node_bytes: u64,
    /// The events since the previous checkpoint.
    pub events: u64,
    /// What those events take, with their index entries.
    pub event_bytes: u64,
}

impl Checkpoint {
    /// A header at `seq` and `time` with nothing counted yet.
    pub(crate) fn at(seq: u64, time: Micros) -> Checkpoint {
        Checkpoint {
            seq,
            time,
            nodes: 0,
            node_bytes: 0,
            events: 0,
            event_bytes: 0,
        }
    }
}

/// Envelope for checkpoint headers (keyed by the checkpoint's seq).
#[derive(Debug, Serialize, Deserialize)]
pub enum StoredCheckpoint {
    V1(CheckpointV1),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointV1 {
    pub time: i64,
    pub nodes: u64,
    pub node_bytes: u64,
    pub events: u64,
    pub event_bytes: u64,
}

pub fn encode_checkpoint(c: &Checkpoint) -> Vec<u8> {
    records::encode(&StoredCheckpoint::V1(CheckpointV1 {
        time: c.time.0,
        nodes: c.nodes,
        node_bytes: c.node_bytes,
        events: c.events,
        event_bytes: c.event_bytes,
    }))
}

pub fn decode_checkpoint(seq: u64, bytes: &[u8]) -> Result<Checkpoint, DecodeError> {
    let StoredCheckpoint::V1(v) =
        records::decode::<StoredCheckpoint>(bytes, || format!("the checkpoint at seq {seq}"))?;
    Ok(Checkpoint {
        seq,
        time: Micros(v.time),
        nodes: v.nodes,
        node_bytes: v.node_bytes,
        events: v.events,
        event_bytes: v.event_bytes,
    })
}

/// What the event at `seq` takes in the store, as retention counts it: its
/// record, a node index entry (counted for every event, though one that
/// continues its node's run in a write has none of its own) and its share
/// of the time index (the entries every stride of seqs hold; the one a write
/// adds for its first event, at most one a write, is not counted).
pub fn stored_event_bytes(seq: u64, record_len: usize, node: Option<&str>) -> u64 {
    let time_entry = if super::time_index::indexed(seq, false) {
        16
    } else {
        0
    };
    (8 + record_len + time_entry + node.map_or(0, |n| n.len() + 9)) as u64
}

/// The registry rebuilt as of a seq (`/v1/at?records=true` serves it as JSON).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct RegistryAt {
    pub nodes: BTreeMap<String, Node>,
    /// The seq it is as of.
    pub seq: u64,
    /// The checkpoint it started from (0: the empty registry before the first event).
    pub checkpoint: u64,
}

impl Store {
    /// Events between checkpoints for a registry of `nodes` nodes.
    pub fn checkpoint_every(&self, nodes: usize) -> u64 {
        self.checkpoint_interval
            .unwrap_or_else(|| interval_for(nodes))
    }

    /// The checkpoint at exactly `seq`, if one is kept.
    pub fn checkpoint(&self, seq: u64) -> Result<Option<Checkpoint>, StoreError> {
        self.checkpoints
            .get(seq.to_be_bytes())?
            .map(|v| Ok(decode_checkpoint(seq, &v)?))
            .transpose()
    }

    /// The newest checkpoint at or before `seq`.
    pub fn checkpoint_at_or_before(&self, seq: u64) -> Result<Option<Checkpoint>, StoreError> {
        match self.checkpoints.range(..=seq.to_be_bytes()).next_back() {
            Some(entry) => {
                let (k, v) = entry?;
                let seq = seq_from_key(&k)?;
                Ok(Some(decode_checkpoint(seq, &v)?))
            }
            None => Ok(None),
        }
    }

    /// The newest checkpoint.
    pub fn newest_checkpoint(&self) -> Result<Option<Checkpoint>, StoreError> {
        self.checkpoint_at_or_before(u64::MAX)
    }

    /// Every checkpoint from the horizon on, oldest first (a few hundred at most).
    pub fn checkpoints_kept(&self) -> Result<Vec<Checkpoint>, StoreError> {
        let mut out = Vec::new();
        for entry in self.checkpoints.range(self.horizon().to_be_bytes()..) {
            let (k, v) = entry?;
            out.push(decode_checkpoint(seq_from_key(&k)?, &v)?);
        }
        Ok(out)
    }

    /// The nodes of the checkpoint at `seq`.
    pub fn checkpoint_registry(&self, seq: u64) -> Result<BTreeMap<String, Node>, StoreError> {
        let mut nodes = BTreeMap::new();
        for value in self
            .checkpoint_nodes
            .scan_prefix(seq.to_be_bytes())
            .values()
        {
            let node = records::decode_node(&value?)?;
            nodes.insert(node.name.clone(), node);
        }
        Ok(nodes)
    }

    /// Where a replay up to `seq` starts: the newest checkpoint at or before
    /// it (`None`: the empty registry before the first event). `horizon` is
    /// the store's, or a pinned reader's floor (see [`super::ReadPin::floor`]).
    fn replay_base(&self, seq: u64, horizon: u64) -> Result<Option<Checkpoint>, StoreError> {
        if seq < horizon {
            return Err(StoreError::Expired {
                requested: seq,
                horizon,
            });
        }
        match self.checkpoint_at_or_before(seq)? {
            // One older than the horizon is being deleted: not a base.
            Some(c) if c.seq >= horizon => Ok(Some(c)),
            _ if horizon == 0 => Ok(None),
            // A pruned store keeps a checkpoint at its horizon; without one
            // (an import of a log that started late) the registry before it was empty.
            _ => Ok(Some(Checkpoint::at(horizon, Micros(i64::MIN)))),
        }
    }

    /// The registry as its history describes it after event `seq`: the
    /// nearest checkpoint, and the events after it replayed. Costs at most
    /// one checkpoint interval of events.
    pub fn registry_at(&self, seq: u64) -> Result<RegistryAt, StoreError> {
        let seq = seq.min(self.durable_seq());
        let base = self.replay_base(seq, self.horizon())?;
        let from = base.as_ref().map_or(0, |c| c.seq);
        let mut replay = Replay::from_nodes(match &base {
            Some(c) if c.nodes > 0 => self.checkpoint_registry(c.seq)?,
            _ => BTreeMap::new(),
        });
        for entry in self.events_in(from + 1..=seq) {
            replay.apply(&entry?.0);
        }
        Ok(RegistryAt {
            nodes: replay.into_nodes(),
            seq,
            checkpoint: from,
        })
    }

    /// The registry as it was at `when`: as of the last event at or before
    /// it. A time before the horizon is refused, naming the horizon.
    pub fn registry_at_time(&self, when: Micros) -> Result<RegistryAt, StoreError> {
        let horizon = self.horizon();
        let seq = self
            .last_seq_at_or_before(when)?
            .unwrap_or(0)
            .min(self.durable_seq());
        if seq >= horizon {
            return self.registry_at(seq);
        }
        let time = self
            .checkpoint(horizon)?
            .map_or(Micros(i64::MIN), |c| c.time);
        if when >= time {
            // Between the horizon's event and the first kept one.
            return self.registry_at(horizon);
        }
        Err(StoreError::BeforeHorizon(when, time, horizon))
    }

    /// One node as its history describes it after event `seq` (`None` if it
    /// was not registered then): its record in the nearest checkpoint, and
    /// its own events after it, through the per-node index.
    pub fn node_at(&self, name: &str, seq: u64) -> Result<Option<Node>, StoreError> {
        self.node_at_pinned(name, seq, self.horizon())
    }

    /// [`Store::node_at`] for a reader holding a pin: it reaches back to the
    /// pin's `floor` even when the horizon has moved past it since.
    pub fn node_at_pinned(
        &self,
        name: &str,
        seq: u64,
        floor: u64,
    ) -> Result<Option<Node>, StoreError> {
        let base = self.replay_base(seq, floor)?;
        let from = base.as_ref().map_or(0, |c| c.seq);
        let mut start = BTreeMap::new();
        if base.is_some() {
            if let Some(v) = self.checkpoint_nodes.get(checkpoint_node_key(from, name))? {
                start.insert(name.to_string(), records::decode_node(&v)?);
            }
        }
        let mut replay = Replay::from_nodes(start);
        for event_seq in self.node_seqs(name, from + 1, seq) {
            let event_seq = event_seq?;
            if let Some(v) = self.events.get(event_seq.to_be_bytes())? {
                replay.apply(&records::decode_event(event_seq, &v)?);
            }
        }
        Ok(replay.into_nodes().remove(name))
    }

    /// Writes the registry `nodes` as the checkpoint `header` describes
    /// (its `nodes` and `node_bytes` are filled in), in small batches, the
    /// header last. Not durable until the next flush.
    pub(crate) fn write_checkpoint(
        &self,
        mut header: Checkpoint,
        nodes: &BTreeMap<String, Node>,
    ) -> Result<Checkpoint, StoreError> {
        let seq = header.seq;
        self.meta.insert(META_IN_PROGRESS, &seq.to_be_bytes())?;
        remove_checkpoint_nodes(self, seq)?;
        header.nodes = 0;
        header.node_bytes = 0;
        let mut batch = sled::Batch::default();
        let mut pending = 0;
        for node in nodes.values() {
            let key = checkpoint_node_key(seq, &node.name);
            let value = records::encode_node(node);
            header.nodes += 1;
            header.node_bytes += (key.len() + value.len()) as u64;
            batch.insert(key, value);
            pending += 1;
            if pending >= WRITE_CHUNK {
                self.checkpoint_nodes
                    .apply_batch(std::mem::take(&mut batch))?;
                pending = 0;
            }
        }
        self.checkpoint_nodes.apply_batch(batch)?;
        self.checkpoints
            .insert(seq.to_be_bytes(), encode_checkpoint(&header))?;
        self.meta.remove(META_IN_PROGRESS)?;
        Ok(header)
    }

    /// Removes a checkpoint (the header first, so it is never half there).
    pub(crate) fn remove_checkpoint(&self, seq: u64) -> Result<(), StoreError> {
        self.checkpoints.remove(seq.to_be_bytes())?;
        remove_checkpoint_nodes(self, seq)
    }

    /// A follower from the checkpoint `base` (kept, from the horizon on), or
    /// from the horizon with an empty registry when there is none.
    pub(super) fn follower_from(&self, base: Option<&Checkpoint>) -> Result<Follower, StoreError> {
        Ok(match base {
            Some(c) => Follower::at(self, c.seq, c.time, self.checkpoint_registry(c.seq)?),
            None => Follower::at(self, self.horizon(), Micros(i64::MIN), BTreeMap::new()),
        })
    }

    /// Writes checkpoints every interval from the newest one up to at most
    /// `upto`, replaying at most `budget` events this call (the rest waits
    /// for the next). Returns the checkpoints written.
    pub(crate) fn write_due_checkpoints(
        &self,
        upto: u64,
        budget: u64,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        let newest = self
            .newest_checkpoint()?
            .filter(|c| c.seq >= self.horizon());
        let from = newest.as_ref().map_or(self.horizon(), |c| c.seq);
        let last_nodes = newest.as_ref().map_or(0, |c| c.nodes as usize);
        if upto.saturating_sub(from) < self.checkpoint_every(last_nodes) {
            return Ok(Vec::new());
        }
        let mut follower = self.follower_from(newest.as_ref())?;
        let mut written = Vec::new();
        let mut replayed = 0u64;
        for entry in self.events_in(from + 1..=upto) {
            let (event, len) = entry?;
            follower.apply(&event, len);
            replayed += 1;
            if follower.due() {
                written.push(follower.write(self)?);
            }
            if replayed >= budget {
                break;
            }
        }
        Ok(written)
    }
}

/// Follows the log from a checkpoint, keeping the registry it describes,
/// and writes a checkpoint whenever one is due.
pub(crate) struct Follower {
    replay: Replay,
    every: Option<u64>,
    seq: u64,
    time: Micros,
    events: u64,
    event_bytes: u64,
}

impl Follower {
    /// Starts from the registry `nodes` as of `seq` (effective time `time`).
    pub(crate) fn at(
        store: &Store,
        seq: u64,
        time: Micros,
        nodes: BTreeMap<String, Node>,
    ) -> Follower {
        Follower {
            replay: Replay::from_nodes(nodes),
            every: store.checkpoint_interval,
            seq,
            time,
            events: 0,
            event_bytes: 0,
        }
    }

    /// Applies the next event, whose record is `record_len` bytes.
    pub(crate) fn apply(&mut self, event: &Event, record_len: usize) {
        self.replay.apply(event);
        self.seq = event.seq;
        self.time = self.time.max(event.time);
        self.events += 1;
        self.event_bytes += stored_event_bytes(event.seq, record_len, event.node.as_deref());
    }

    /// Whether enough events passed since the last checkpoint.
    pub(crate) fn due(&self) -> bool {
        let nodes = self.replay.nodes().len();
        self.events >= self.every.unwrap_or_else(|| interval_for(nodes))
    }

    /// Writes a checkpoint of the registry as of the last event applied.
    pub(crate) fn write(&mut self, store: &Store) -> Result<Checkpoint, StoreError> {
        let header = Checkpoint {
            events: self.events,
            event_bytes: self.event_bytes,
            ..Checkpoint::at(self.seq, self.time)
        };
        let header = store.write_checkpoint(header, self.replay.nodes())?;
        self.events = 0;
        self.event_bytes = 0;
        Ok(header)
    }
}

fn remove_checkpoint_nodes(store: &Store, seq: u64) -> Result<(), StoreError> {
    loop {
        let mut batch = sled::Batch::default();
        let mut pending = 0;
        for key in store.checkpoint_nodes.scan_prefix(seq.to_be_bytes()).keys() {
            batch.remove(key?);
            pending += 1;
            if pending >= WRITE_CHUNK {
                break;
            }
        }
        if pending == 0 {
            return Ok(());
        }
        store.checkpoint_nodes.apply_batch(batch)?;
    }
}

/// Removes what a checkpoint write interrupted by a crash left behind.
pub(super) fn discard_partial(store: &Store) -> Result<(), StoreError> {
    let Some(raw) = store.meta.get(META_IN_PROGRESS)? else {
        return Ok(());
    };
    let seq = seq_from_key(&raw)?;
    if store.checkpoints.contains_key(seq.to_be_bytes())? {
        // Complete: only the marker's removal was lost.
        store.meta.remove(META_IN_PROGRESS)?;
        return Ok(());
    }
    remove_checkpoint_nodes(store, seq)?;
    store.meta.remove(META_IN_PROGRESS)?;
    store.db.flush()?;
    Ok(())
}

/// Checks every checkpoint from the horizon on: it holds as many nodes as
/// its header says, and (through `replayed`) what its history describes.
pub(super) fn verify_counts(store: &Store) -> Result<Vec<String>, StoreError> {
    let mut problems = Vec::new();
    for c in store.checkpoints_kept()? {
        let found = store
            .checkpoint_nodes
            .scan_prefix(c.seq.to_be_bytes())
            .count() as u64;
        if found != c.nodes {
            problems.push(format!(
                "the checkpoint at seq {} has {found} nodes, its header says {}",
                c.seq, c.nodes
            ));
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn checkpoint_v1_golden_bytes() {
        let c = Checkpoint {
            seq: 7,
            time: Micros(1_700_000_000_000_000),
            nodes: 2,
            node_bytes: 300,
            events: 10_000,
            event_bytes: 1_500_000,
        };
        let bytes = encode_checkpoint(&c);
        assert_eq!(hex(&bytes), "008080f2818389850602ac02904ee0c65b");
        assert_eq!(decode_checkpoint(7, &bytes).unwrap(), c);
        assert!(decode_checkpoint(7, &[1, 2]).is_err());
    }

    #[test]
    fn intervals_grow_with_the_registry() {
        assert_eq!(interval_for(0), MIN_INTERVAL);
        assert_eq!(interval_for(1_000), MIN_INTERVAL);
        assert_eq!(interval_for(10_000), 50_000);
    }
}
