//! The per-node index, in runs: one entry for the events of a node that a
//! write puts one after the other (a status change and the taint that
//! follows it), keyed by the first one's seq, its value the run's length.
//! An empty value is a run of one, as every entry before schema 5 is, so
//! older stores read unchanged.

use migrations::v2_node_index::index_key;

use super::{records, seq_from_key, Store, StoreError};
use crate::model::Event;

/// A run of a node's events: its first seq and how many.
pub(super) type Run = (u64, u64);

/// A node index entry to write: its key and value.
pub(super) type Entry = (Vec<u8>, Vec<u8>);

/// The value of a run's entry: nothing for one event, else its length.
pub(super) fn run_value(len: u64) -> Vec<u8> {
    if len == 1 {
        Vec::new()
    } else {
        (len as u32).to_be_bytes().to_vec()
    }
}

/// The run an entry holds.
pub(super) fn parse_run(key: &[u8], value: &[u8]) -> Result<Run, StoreError> {
    let seq = seq_from_key(&key[key.len().saturating_sub(8)..])?;
    let len = match value.len() {
        0 => 1,
        4 => u32::from_be_bytes(value.try_into().expect("4 bytes")).max(1) as u64,
        n => {
            return Err(StoreError::Decode(records::DecodeError {
                what: format!("the node index entry of event {seq}"),
                reason: format!("a run length of {n} bytes, not 4"),
            }))
        }
    };
    Ok((seq, len))
}

/// The runs of a write's events, in seq order: each node, its first seq
/// and how many of its events follow one another.
pub(super) fn runs<'a>(events: impl Iterator<Item = &'a Event>) -> Vec<(&'a str, Run)> {
    let mut runs: Vec<(&str, Run)> = Vec::new();
    for e in events {
        let Some(node) = e.node.as_deref() else {
            continue;
        };
        match runs.last_mut() {
            Some((last, (first, len)))
                if *last == node && *first + *len == e.seq && *len < u32::MAX as u64 =>
            {
                *len += 1;
            }
            _ => runs.push((node, (e.seq, 1))),
        }
    }
    runs
}

impl Store {
    /// The seqs of `node`'s events from `lo` to `hi`, in order: the run
    /// that starts before `lo` may reach into the range.
    pub(super) fn node_seqs<'a>(
        &'a self,
        node: &str,
        lo: u64,
        hi: u64,
    ) -> impl Iterator<Item = Result<u64, StoreError>> + 'a {
        let before = (lo > 0)
            .then(|| {
                self.node_events
                    .range(index_key(node, 0)..index_key(node, lo))
                    .next_back()
            })
            .flatten();
        let from = self
            .node_events
            .range(index_key(node, lo)..=index_key(node, hi.max(lo)));
        before.into_iter().chain(from).flat_map(move |entry| {
            // An entry that does not read yields its error and no seqs.
            let (seqs, err) = match entry
                .map_err(StoreError::from)
                .and_then(|(k, v)| parse_run(&k, &v))
            {
                Ok((first, len)) => (
                    first.max(lo)..first.saturating_add(len).min(hi.saturating_add(1)),
                    None,
                ),
                Err(e) => (0..0, Some(Err(e))),
            };
            err.into_iter().chain(seqs.map(Ok))
        })
    }

    /// Whether the index has the event `seq` under `node`.
    pub(super) fn node_index_has(&self, node: &str, seq: u64) -> Result<bool, StoreError> {
        match self
            .node_events
            .range(index_key(node, 0)..=index_key(node, seq))
            .next_back()
        {
            Some(entry) => {
                let (k, v) = entry?;
                let (first, len) = parse_run(&k, &v)?;
                Ok(first + len > seq)
            }
            None => Ok(false),
        }
    }

    /// The entry of the run that holds event `seq` of `node` and reaches
    /// past it, with what is left of it after `seq`: when the events up to
    /// `seq` are pruned, that rest is keyed by the event after `seq`.
    pub(super) fn run_past(&self, node: &str, seq: u64) -> Result<Option<Entry>, StoreError> {
        let Some(entry) = self
            .node_events
            .range(index_key(node, 0)..=index_key(node, seq))
            .next_back()
        else {
            return Ok(None);
        };
        let (k, v) = entry?;
        let (first, len) = parse_run(&k, &v)?;
        let last = first + len - 1;
        Ok((len > 1 && first <= seq && last > seq)
            .then(|| (index_key(node, seq + 1), run_value(last - seq))))
    }
}
