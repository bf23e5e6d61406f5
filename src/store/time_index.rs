//! The time index, kept sparse: an entry (effective time, seq) for the
//! first event of every write and for every [`STRIDE`]th seq, not for every
//! event. Effective times only grow with seq, so the events between two
//! entries have the running maximum of their own times, starting from the
//! entry before them: a reader scans at most a stride of events to place a
//! time exactly. An index with an entry for every event (as every store
//! before this one has) is a sparse index too, so old stores read unchanged.
//!
//! Kept true by the writers: [`Store::write_all`] indexes the first event
//! it writes (after a restart or a prune the one before may be gone),
//! retention gives the first event it keeps an entry, and import indexes
//! the first event it loads and every stride after it.

use std::ops::Bound;

use migrations::v4_history_index::{parse_time_key, time_key};

use super::{records, seq_from_key, Store, StoreError};
use crate::model::Micros;

/// At most this many events in a row have no entry, so placing a time in
/// the history reads at most this many events.
pub(super) const STRIDE: u64 = 64;

/// Whether the event at `seq` gets an entry, `first` when it is the first
/// event of its write.
pub(super) fn indexed(seq: u64, first: bool) -> bool {
    first || seq.is_multiple_of(STRIDE)
}

/// An entry of the index: an event's effective time and its seq.
pub(super) type Entry = (i64, u64);

pub(super) fn parse(key: &[u8]) -> Result<Entry, StoreError> {
    parse_time_key(key).ok_or_else(|| {
        StoreError::Decode(records::DecodeError {
            what: "a time index key".into(),
            reason: format!("{} bytes, not 16", key.len()),
        })
    })
}

impl Store {
    /// The first kept seq whose effective time is at or after `time`.
    pub fn first_seq_at_or_after(&self, time: Micros) -> Result<Option<u64>, StoreError> {
        let horizon = self.horizon();
        let at = time_key(time.0, 0);
        let before = self.time_entry(self.event_times.range(..at).next_back())?;
        let from = self.time_entry(self.event_times.range(at..).next())?;
        let first = match before {
            // The first kept event has an entry: nothing before it is kept.
            None => from.map(|(_, seq)| seq),
            Some(anchor) => {
                let to = from.map_or(u64::MAX, |(_, seq)| seq.saturating_sub(1));
                let mut found = None;
                for step in self.effective_times(anchor, to) {
                    let (seq, effective) = step?;
                    if effective >= time.0 {
                        found = Some(seq);
                        break;
                    }
                }
                found.or(from.map(|(_, seq)| seq))
            }
        };
        match first {
            Some(seq) if seq > horizon => Ok(Some(seq)),
            // Pruned or about to be: every later event is at or after `time` too.
            Some(_) => self
                .events
                .range((horizon + 1).to_be_bytes()..)
                .keys()
                .next()
                .map(|key| seq_from_key(&key?))
                .transpose(),
            None => Ok(None),
        }
    }

    /// The last seq whose effective time is at or before `time`, if any is
    /// kept (pruned ones included: the answer may be at or below the horizon).
    pub fn last_seq_at_or_before(&self, time: Micros) -> Result<Option<u64>, StoreError> {
        let through = time_key(time.0, u64::MAX);
        let Some(anchor) = self.time_entry(self.event_times.range(..=through).next_back())? else {
            return Ok(None);
        };
        let after = self.time_entry(
            self.event_times
                .range((Bound::Excluded(through), Bound::Unbounded))
                .next(),
        )?;
        let to = after.map_or(u64::MAX, |(_, seq)| seq.saturating_sub(1));
        let mut last = anchor.1;
        for step in self.effective_times(anchor, to) {
            let (seq, effective) = step?;
            if effective > time.0 {
                break;
            }
            last = seq;
        }
        Ok(Some(last))
    }

    /// The effective time of the newest event: the writer's starting point
    /// when the store opens.
    pub(super) fn last_effective_time(&self) -> Result<i64, StoreError> {
        let anchor = self
            .time_entry(self.event_times.iter().next_back())?
            .unwrap_or((i64::MIN, 0));
        let mut effective = anchor.0;
        for step in self.effective_times(anchor, u64::MAX) {
            effective = step?.1;
        }
        Ok(effective)
    }

    fn time_entry(
        &self,
        entry: Option<sled::Result<(sled::IVec, sled::IVec)>>,
    ) -> Result<Option<Entry>, StoreError> {
        entry.map(|e| parse(&e?.0)).transpose()
    }

    /// The events after the entry `anchor`, up to seq `to`, each with its
    /// effective time: the running maximum of their times from the anchor's.
    fn effective_times(
        &self,
        anchor: Entry,
        to: u64,
    ) -> impl Iterator<Item = Result<(u64, i64), StoreError>> + '_ {
        let (mut effective, from) = anchor;
        let range = match from.checked_add(1) {
            Some(first) if first <= to => Some(self.events_in(first..=to)),
            _ => None,
        };
        range.into_iter().flatten().map(move |entry| {
            let (event, _) = entry?;
            effective = effective.max(event.time.0);
            Ok((event.seq, effective))
        })
    }
}

/// What `db verify` checks of the time index, fed every kept event in seq
/// order: each entry no earlier than the event's effective time as the
/// entries and events before it give it, the first kept event indexed, and
/// no more than a stride of events in a row without an entry.
pub(super) struct Check<I: Iterator<Item = sled::Result<sled::IVec>>> {
    entries: I,
    /// An entry read ahead, for a later event.
    ahead: Option<Entry>,
    effective: Option<i64>,
    unindexed: u64,
}

impl<I: Iterator<Item = sled::Result<sled::IVec>>> Check<I> {
    /// Checks against `entries`, the index's keys in order.
    pub(super) fn new(entries: I) -> Self {
        Check {
            entries,
            ahead: None,
            effective: None,
            unindexed: 0,
        }
    }

    /// The next kept event: its seq and its time (`None` when its record
    /// does not decode).
    pub(super) fn event(
        &mut self,
        seq: u64,
        time: Option<i64>,
        problems: &mut Vec<String>,
    ) -> Result<(), StoreError> {
        let entry = self.entry_for(seq, problems)?;
        let derived = match (self.effective, time) {
            (Some(e), Some(t)) => Some(e.max(t)),
            (e, t) => e.or(t),
        };
        match entry {
            Some(t) => {
                if derived.is_some_and(|d| t < d) {
                    problems.push(format!(
                        "the time index puts event {seq} before its own time or the one it follows"
                    ));
                }
                self.effective = Some(t);
                self.unindexed = 0;
            }
            None => {
                if self.effective.is_none() {
                    problems.push(format!(
                        "event {seq}, the first kept, is missing from the time index"
                    ));
                }
                self.effective = derived;
                self.unindexed += 1;
                if self.unindexed == STRIDE {
                    problems.push(format!(
                        "events {} to {seq} are missing from the time index (at most {} in a row may be)",
                        seq + 1 - STRIDE,
                        STRIDE - 1
                    ));
                }
            }
        }
        Ok(())
    }

    /// The effective time the index gives `seq`, if it has an entry for it.
    /// Entries below `seq` (their events gone) are passed over.
    fn entry_for(
        &mut self,
        seq: u64,
        problems: &mut Vec<String>,
    ) -> Result<Option<i64>, StoreError> {
        loop {
            let (time, s) = match self.ahead.take() {
                Some(entry) => entry,
                None => match self.entries.next() {
                    None => return Ok(None),
                    Some(key) => {
                        let key = key?;
                        match parse_time_key(&key) {
                            Some(entry) => entry,
                            None => {
                                problems.push(format!(
                                    "a time index key of {} bytes, not 16",
                                    key.len()
                                ));
                                continue;
                            }
                        }
                    }
                },
            };
            if s == seq {
                return Ok(Some(time));
            }
            if s > seq {
                self.ahead = Some((time, s));
                return Ok(None);
            }
        }
    }
}
