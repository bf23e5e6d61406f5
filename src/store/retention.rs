//! Retention: the history is kept for `--history-retention` and within
//! `--history-max-bytes`; what is older is pruned in the background, in small
//! batches, and the registry as of the first kept event stays as a
//! checkpoint (the *horizon*), so every question about the kept history is
//! still answered exactly.
//!
//! The horizon only ever moves to a checkpoint: either a periodic one or one
//! written for the purpose when enough events are due. Readers that are in
//! the middle of old history *pin* it: pruning moves the horizon at once (new
//! readers start after it) but deletes nothing a live pin still needs. A pin
//! older than [`PIN_TTL`] no longer holds pruning back; its reader then finds
//! its history gone ([`StoreError::Expired`]) instead of reading holes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use migrations::v2_node_index::index_key;
use migrations::v4_history_index::time_key;
use serde::{Deserialize, Serialize};
use sled::transaction::{ConflictableTransactionError, Transactional};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::checkpoint::{stored_event_bytes, Checkpoint};
use super::{records, seq_from_key, time_index, Store, StoreError, META_HORIZON};
use crate::model::Micros;

/// How long the history is kept unless `--history-retention` says otherwise.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(90 * 24 * 3600);
/// How much history is kept unless `--history-max-bytes` says otherwise.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;
/// A pin this old no longer holds pruning back.
pub const PIN_TTL: Duration = Duration::from_secs(600);
/// Events deleted in one sled transaction: each briefly holds every writer
/// off (sled serialises transactions), so a batch stays a few milliseconds.
const PRUNE_BATCH: usize = 512;
/// Batches per step; between steps the task sleeps [`STEP_PAUSE`].
const BATCHES_PER_STEP: usize = 4;
const STEP_PAUSE: Duration = Duration::from_millis(20);
/// Events replayed per step while catching up on checkpoints.
const CHECKPOINT_BUDGET: u64 = 200_000;

/// How much history to keep. Both limits apply; `None` is no limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionConfig {
    pub max_age: Option<Duration>,
    pub max_bytes: Option<u64>,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            max_age: Some(DEFAULT_MAX_AGE),
            max_bytes: Some(DEFAULT_MAX_BYTES),
        }
    }
}

impl RetentionConfig {
    /// How often the pruner looks: a tenth of the retention, between 100ms and 10s.
    pub fn period(&self) -> Duration {
        self.max_age
            .map_or(Duration::from_secs(10), |age| age / 10)
            .clamp(Duration::from_millis(100), Duration::from_secs(10))
    }
}

/// Retention as a running controller applies it, for `db status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetentionStatus {
    pub max_age_seconds: Option<u64>,
    pub max_bytes: Option<u64>,
    /// The kept history's size as retention counts it: its events with
    /// their index entries, and its checkpoints.
    pub history_bytes: u64,
}

/// The horizon, and the readers holding old history.
pub(crate) struct HistoryGuard {
    state: Mutex<GuardState>,
    /// Deletion may have removed events (and checkpoints before) up to this seq.
    deleting_through: AtomicU64,
}

struct GuardState {
    horizon: u64,
    pins: BTreeMap<u64, (u64, Instant)>,
    next_id: u64,
}

impl HistoryGuard {
    pub(crate) fn new(horizon: u64) -> HistoryGuard {
        HistoryGuard {
            state: Mutex::new(GuardState {
                horizon,
                pins: BTreeMap::new(),
                next_id: 0,
            }),
            deleting_through: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GuardState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn horizon(&self) -> u64 {
        self.lock().horizon
    }

    pub(crate) fn set_horizon(&self, horizon: u64) {
        self.lock().horizon = horizon;
    }

    /// The lowest seq a live pin holds.
    fn lowest_pin(&self) -> Option<u64> {
        let state = self.lock();
        state
            .pins
            .values()
            .filter(|(_, since)| since.elapsed() < PIN_TTL)
            .map(|(seq, _)| *seq)
            .min()
    }
}

/// Holds the history after `seq` (and the checkpoint it starts from) until
/// dropped or advanced. See the module docs.
pub struct ReadPin {
    guard: Arc<HistoryGuard>,
    id: u64,
}

impl ReadPin {
    /// How far back this reader may still read: the horizon, or its pin
    /// when the horizon has moved past it since.
    pub fn floor(&self) -> u64 {
        let state = self.guard.lock();
        let pinned = state.pins.get(&self.id).map_or(state.horizon, |p| p.0);
        pinned.min(state.horizon)
    }

    /// The reader moved on: what is before `seq` may go.
    pub fn advance(&self, seq: u64) {
        if let Some(pin) = self.guard.lock().pins.get_mut(&self.id) {
            pin.0 = pin.0.max(seq);
        }
    }
}

impl Drop for ReadPin {
    fn drop(&mut self) {
        self.guard.lock().pins.remove(&self.id);
    }
}

impl Store {
    /// Pins the history after `seq` for a reader; refused when that is
    /// already before the horizon.
    pub fn pin_history(&self, seq: u64) -> Result<ReadPin, StoreError> {
        let mut state = self.guard.lock();
        if seq < state.horizon {
            return Err(StoreError::Expired {
                requested: seq,
                horizon: state.horizon,
            });
        }
        let id = state.next_id;
        state.next_id += 1;
        state.pins.insert(id, (seq, Instant::now()));
        Ok(ReadPin {
            guard: self.guard.clone(),
            id,
        })
    }

    /// Fails when pruning may have removed history after `seq` (a reader
    /// whose pin expired): what it read since may have holes.
    pub fn check_kept(&self, seq: u64) -> Result<(), StoreError> {
        if self.guard.deleting_through.load(Ordering::Acquire) > seq {
            return Err(StoreError::Expired {
                requested: seq,
                horizon: self.horizon(),
            });
        }
        Ok(())
    }

    /// Records the retention a running controller applies (shown by `db status`).
    pub fn set_retention_status(&self, status: RetentionStatus) {
        *self.retention.lock().unwrap_or_else(|p| p.into_inner()) = Some(status);
    }

    pub(crate) fn retention_status(&self) -> Option<RetentionStatus> {
        self.retention
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Moves the horizon to the checkpoint at `seq` (it must exist): durable
    /// first, then visible.
    fn move_horizon(&self, seq: u64) -> Result<(), StoreError> {
        self.db.flush()?;
        self.meta.insert(META_HORIZON, &seq.to_be_bytes())?;
        self.db.flush()?;
        self.guard.set_horizon(seq);
        Ok(())
    }

    /// Writes a checkpoint at `seq` (between the periodic ones), keeping the
    /// next one's count of the events since its predecessor right.
    fn write_checkpoint_at(&self, seq: u64) -> Result<Checkpoint, StoreError> {
        let base = self
            .checkpoint_at_or_before(seq)?
            .filter(|c| c.seq >= self.horizon());
        let mut follower = self.follower_from(base.as_ref())?;
        let from = base.as_ref().map_or(self.horizon(), |c| c.seq);
        for entry in self.events_in(from + 1..=seq) {
            let (event, len) = entry?;
            follower.apply(&event, len);
        }
        let written = follower.write(self)?;
        if let Some(next) = self
            .checkpoints
            .range((seq + 1).to_be_bytes()..)
            .next()
            .transpose()?
        {
            let mut header = super::checkpoint::decode_checkpoint(seq_from_key(&next.0)?, &next.1)?;
            header.events = header.events.saturating_sub(written.events);
            header.event_bytes = header.event_bytes.saturating_sub(written.event_bytes);
            self.checkpoints
                .insert(next.0, super::checkpoint::encode_checkpoint(&header))?;
        }
        Ok(written)
    }

    /// What the kept history takes, as retention counts it: the events
    /// after the horizon with their index entries (from the checkpoint
    /// headers, and `tail` after the newest), and every kept checkpoint.
    fn history_bytes(&self, kept: &[Checkpoint], tail: u64) -> u64 {
        let horizon = self.horizon();
        kept.iter()
            .map(|c| c.node_bytes + if c.seq > horizon { c.event_bytes } else { 0 })
            .sum::<u64>()
            + tail
    }

    /// The oldest checkpoint pruning to which brings the history within
    /// `max` bytes (at most the newest: its registry and what follows stay).
    fn bytes_target(&self, kept: &[Checkpoint], tail: u64, max: u64) -> u64 {
        let horizon = self.horizon();
        let mut total = self.history_bytes(kept, tail);
        let mut target = horizon;
        for (i, c) in kept.iter().enumerate() {
            if total <= max {
                break;
            }
            if c.seq <= horizon {
                continue;
            }
            // Pruning to `c` lets go of the checkpoint before it and the events up to `c`.
            if let Some(previous) = i.checked_sub(1).map(|p| &kept[p]) {
                total = total.saturating_sub(previous.node_bytes);
            }
            total = total.saturating_sub(c.event_bytes);
            target = c.seq;
        }
        target
    }

    /// One step of retention: writes the checkpoints due, moves the horizon
    /// when the limits ask for it, and deletes a few batches of what is
    /// before it. `tail` carries the size of the events after the newest
    /// checkpoint from one step to the next.
    pub fn retention_step(
        &self,
        config: &RetentionConfig,
        now: Micros,
        tail: &mut TailBytes,
    ) -> Result<StepReport, StoreError> {
        let mut report = StepReport::default();
        let durable = self.durable_seq();
        let written = self.write_due_checkpoints(durable, CHECKPOINT_BUDGET)?;
        if !written.is_empty() {
            self.db.flush()?;
            report.checkpoints_written = written.len();
        }
        let kept = self.checkpoints_kept()?;
        let newest = kept.last().map_or(self.horizon(), |c| c.seq);
        tail.follow(self, newest, durable)?;
        let horizon = self.horizon();
        let mut target = horizon;
        if let Some(age) = config.max_age {
            let cutoff = Micros(now.0.saturating_sub(age.as_micros() as i64));
            if let Some(seq) = self.last_seq_at_or_before(cutoff)? {
                target = target.max(seq);
            }
        }
        if let Some(max) = config.max_bytes {
            target = target.max(self.bytes_target(&kept, tail.bytes, max));
        }
        target = target.min(durable);
        if target > horizon {
            let mut to = kept
                .iter()
                .rev()
                .find(|c| c.seq <= target)
                .map_or(horizon, |c| c.seq);
            // No checkpoint in between: write one when it costs less than
            // what it lets go (a checkpoint takes about one event per node).
            let nodes = kept.last().map_or(0, |c| c.nodes);
            if to <= horizon && target - horizon >= nodes.max(1) {
                to = self.write_checkpoint_at(target)?.seq;
                report.checkpoints_written += 1;
            }
            if to > horizon {
                self.move_horizon(to)?;
                report.horizon = Some(to);
            }
        }
        let horizon = self.horizon();
        let hold = self.guard.lowest_pin().map_or(horizon, |p| p.min(horizon));
        let deletable = self
            .checkpoint_at_or_before(hold)?
            .map_or(0, |c| c.seq)
            .min(horizon);
        let (deleted, more) = self.delete_before(deletable)?;
        report.deleted_events = deleted;
        report.more = more;
        if deleted > 0 && !more {
            self.db.flush()?;
        }
        let kept = self.checkpoints_kept()?;
        self.set_retention_status(RetentionStatus {
            max_age_seconds: config.max_age.map(|d| d.as_secs()),
            max_bytes: config.max_bytes,
            history_bytes: self.history_bytes(&kept, tail.bytes),
        });
        Ok(report)
    }

    /// Deletes a few batches of the events (with their index entries) up to
    /// `upto`, then the checkpoints before it. Returns what it deleted and
    /// whether more is left.
    fn delete_before(&self, upto: u64) -> Result<(u64, bool), StoreError> {
        let mut deleted = 0u64;
        for _ in 0..BATCHES_PER_STEP {
            let mut events = Vec::new();
            for entry in self.events.range(..=upto.to_be_bytes()).take(PRUNE_BATCH) {
                let (k, v) = entry?;
                let seq = seq_from_key(&k)?;
                // A record that does not decode goes all the same; its index
                // entry, if any, is swept with the keys of its node below.
                let event = records::decode_event(seq, &v).ok();
                let time = event.as_ref().map(|e| e.time.0);
                events.push((seq, event.and_then(|e| e.node), time));
            }
            let through = events.last().map_or(upto, |(seq, _, _)| *seq);
            let times = self.time_keys_through(through)?;
            if events.is_empty() && times.keys.is_empty() {
                break;
            }
            let anchor = self.first_kept_anchor(through, &events, &times)?;
            // The run of the last event deleted may reach past it: its rest
            // is keyed by the first event kept.
            let rest = match events.last() {
                Some((seq, Some(node), _)) => self.run_past(node, *seq)?,
                _ => None,
            };
            if let Some((last, _, _)) = events.last() {
                self.guard
                    .deleting_through
                    .fetch_max(*last, Ordering::AcqRel);
            }
            (&self.events, &self.node_events, &self.event_times).transaction(
                |(log, index, time_index)| {
                    for (seq, node, _) in &events {
                        log.remove(&seq.to_be_bytes())?;
                        if let Some(node) = node {
                            index.remove(index_key(node, *seq))?;
                        }
                    }
                    for key in &times.keys {
                        time_index.remove(key)?;
                    }
                    if let Some((key, len)) = &rest {
                        index.insert(key.as_slice(), len.as_slice())?;
                    }
                    if let Some(key) = &anchor {
                        time_index.insert(&key[..], &[] as &[u8])?;
                    }
                    Ok::<_, ConflictableTransactionError<StoreError>>(())
                },
            )?;
            deleted += events.len() as u64;
        }
        self.guard
            .deleting_through
            .fetch_max(upto, Ordering::AcqRel);
        if deleted > 0 {
            return Ok((deleted, true));
        }
        // Then the checkpoints older than the one at `upto`, one per step.
        if let Some(entry) = self.checkpoints.range(..upto.to_be_bytes()).next() {
            let (k, _) = entry?;
            self.remove_checkpoint(seq_from_key(&k)?)?;
            return Ok((0, true));
        }
        Ok((0, false))
    }
}

/// The time index's entries up to a seq, as [`Store::time_keys_through`]
/// reads them for one batch of pruning.
struct TimeKeys {
    keys: Vec<sled::IVec>,
    /// The last of them: the entry the events after it are timed from.
    last: Option<time_index::Entry>,
    /// The seq of the entry after them, when there is one and it was reached.
    next: Option<u64>,
    /// Whether every entry up to the seq was read (not cut off by the batch size).
    complete: bool,
}

impl Store {
    /// The time index's entries for events up to `through`, at most a
    /// batch of them.
    fn time_keys_through(&self, through: u64) -> Result<TimeKeys, StoreError> {
        let mut times = TimeKeys {
            keys: Vec::new(),
            last: None,
            next: None,
            complete: true,
        };
        for key in self.event_times.iter().keys() {
            let key = key?;
            let (time, seq) = time_index::parse(&key)?;
            if seq > through {
                times.next = Some(seq);
                return Ok(times);
            }
            if times.keys.len() == PRUNE_BATCH {
                times.complete = false;
                return Ok(times);
            }
            times.last = Some((time, seq));
            times.keys.push(key);
        }
        Ok(times)
    }

    /// The time index entry the first event kept after `through` needs
    /// once `events` and the entries `times` are gone, if it has none: the
    /// index is sparse, and the events its effective time follows from are
    /// being deleted (see [`time_index`]).
    fn first_kept_anchor(
        &self,
        through: u64,
        events: &[(u64, Option<String>, Option<i64>)],
        times: &TimeKeys,
    ) -> Result<Option<[u8; 16]>, StoreError> {
        if !times.complete {
            return Ok(None);
        }
        let Some(entry) = self.events.range((through + 1).to_be_bytes()..).next() else {
            return Ok(None);
        };
        let (k, v) = entry?;
        let seq = seq_from_key(&k)?;
        if times.next == Some(seq) {
            return Ok(None);
        }
        let (mut effective, from) = times.last.unwrap_or((i64::MIN, 0));
        for (_, _, time) in events.iter().filter(|(s, _, _)| *s > from) {
            effective = effective.max(time.unwrap_or(i64::MIN));
        }
        if let Ok(event) = records::decode_event(seq, &v) {
            effective = effective.max(event.time.0);
        }
        Ok(Some(time_key(effective, seq)))
    }
}

/// What one retention step did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StepReport {
    pub checkpoints_written: usize,
    /// Where the horizon moved to, if it did.
    pub horizon: Option<u64>,
    pub deleted_events: u64,
    /// More deletion is waiting: the next step comes soon.
    pub more: bool,
}

/// The size of the events after the newest checkpoint, followed as the log grows.
#[derive(Debug, Default, Clone, Copy)]
pub struct TailBytes {
    checkpoint: u64,
    upto: u64,
    bytes: u64,
}

impl TailBytes {
    fn follow(&mut self, store: &Store, newest: u64, durable: u64) -> Result<(), StoreError> {
        if newest != self.checkpoint || self.upto < newest {
            *self = TailBytes {
                checkpoint: newest,
                upto: newest,
                bytes: 0,
            };
        }
        for entry in store
            .events
            .range((self.upto + 1).to_be_bytes()..=durable.to_be_bytes())
        {
            let (k, v) = entry?;
            let seq = seq_from_key(&k)?;
            let node = records::decode_event(seq, &v).ok().and_then(|e| e.node);
            self.bytes += stored_event_bytes(seq, v.len(), node.as_deref());
            self.upto = seq;
        }
        Ok(())
    }
}

/// The retention task: a step every [`RetentionConfig::period`] (sooner
/// while deletion is under way), on the blocking pool, until `shutdown`.
pub async fn run(store: Arc<Store>, config: RetentionConfig, shutdown: CancellationToken) {
    let mut tail = TailBytes::default();
    let mut last_error: Option<Instant> = None;
    loop {
        let step_store = store.clone();
        let step_config = config.clone();
        let mut step_tail = tail;
        let outcome = tokio::task::spawn_blocking(move || {
            let report = step_store.retention_step(&step_config, Micros::now(), &mut step_tail);
            (report, step_tail)
        })
        .await;
        let wait = match outcome {
            Ok((Ok(report), new_tail)) => {
                tail = new_tail;
                if let Some(horizon) = report.horizon {
                    tracing::info!(
                        horizon,
                        checkpoints = report.checkpoints_written,
                        "history before seq {horizon} is past its retention: pruning it"
                    );
                }
                if report.more {
                    STEP_PAUSE
                } else {
                    config.period()
                }
            }
            Ok((Err(e), _)) => {
                // Logged at most once a minute; the next step tries again.
                if last_error.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                    tracing::warn!("history retention failed (it tries again): {e}");
                    last_error = Some(Instant::now());
                }
                config.period()
            }
            Err(e) => {
                tracing::error!("history retention panicked (it tries again): {e}");
                config.period()
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}
