//! Reading the history a page at a time, each page costing what it returns:
//! a node's events through the per-node index (see [`super::node_index`]),
//! a time range through the time index (see [`super::time_index`]), the rest
//! as a range of seqs. Nothing reads the whole log to answer a question
//! about part of it.

use super::{records, Store, StoreError};
use crate::model::{Event, EventKind, Micros};

/// The condition types Kubernetes defines for nodes: always known, even
/// before the history has seen one change.
pub const STANDARD_CONDITIONS: &[&str] = &[
    "Ready",
    "MemoryPressure",
    "DiskPressure",
    "PIDPressure",
    "NetworkUnavailable",
];

/// At most this many records are looked at for one page, so a page costs a
/// bounded amount even when a filter keeps few of them.
const SCAN_BUDGET: usize = 10_000;

/// What history to read.
#[derive(Debug, Clone, Default)]
pub struct HistoryQuery {
    pub node: Option<String>,
    /// Events at or after this time. Times are *effective* times: an event
    /// written after the wall clock stepped back counts as happening at the
    /// newest time written before it, so a time range is a range of seqs.
    pub since: Option<Micros>,
    /// Events at or before this time (effective, as for `since`).
    pub until: Option<Micros>,
    /// Changes of this condition type only (case-insensitive).
    pub condition: Option<String>,
    /// Events after this seq only (for watches and paging).
    pub after_seq: Option<u64>,
    /// At most this many events (the oldest first).
    pub limit: Option<usize>,
}

impl HistoryQuery {
    fn matches(&self, e: &Event) -> bool {
        match (&self.condition, &e.kind) {
            (None, _) => true,
            (Some(want), EventKind::ConditionChanged { condition, .. }) => {
                want.eq_ignore_ascii_case(condition)
            }
            (Some(_), _) => false,
        }
    }
}

/// One page of history, oldest first.
#[derive(Debug, Default)]
pub struct HistoryPage {
    pub events: Vec<Event>,
    /// The `after_seq` of the next page; `None` when nothing is left.
    pub next_after: Option<u64>,
}

impl Store {
    /// Up to `max` durable events matching the query, from its `after_seq`
    /// on. Looks at no more than a bounded number of records: a page may be
    /// short (even empty) with a `next_after` to continue from.
    pub fn history_page(
        &self,
        query: &HistoryQuery,
        max: usize,
    ) -> Result<HistoryPage, StoreError> {
        self.history_page_pinned(query, max, self.horizon())
    }

    /// [`Store::history_page`] for a reader holding a pin: it reads on from
    /// its cursor down to the pin's `floor` (see
    /// [`super::ReadPin::floor`]), even when the horizon has moved past it
    /// since. Check [`Store::check_kept`] after each page.
    pub fn history_page_pinned(
        &self,
        query: &HistoryQuery,
        max: usize,
        floor: u64,
    ) -> Result<HistoryPage, StoreError> {
        let max = max.clamp(1, query.limit.unwrap_or(usize::MAX).max(1));
        let Some((lo, hi)) = self.seq_bounds(query, floor)? else {
            return Ok(HistoryPage::default());
        };
        let mut page = HistoryPage::default();
        let mut scanned = 0usize;
        let mut last = lo - 1;
        // The seqs looked at, each with its event: a node's through its
        // index (an entry whose event a concurrent prune just removed has
        // none), else every seq of the range.
        let of_node = query.node.as_ref().map(|node| {
            self.node_seqs(node, lo, hi).map(|seq| {
                let seq = seq?;
                let bytes = self.events.get(seq.to_be_bytes())?;
                Ok((
                    seq,
                    bytes.map(|b| records::decode_event(seq, &b)).transpose()?,
                ))
            })
        });
        let of_range = query.node.is_none().then(|| {
            self.events_in(lo..=hi)
                .map(|entry| entry.map(|(event, _)| (event.seq, Some(event))))
        });
        let looked_at = of_node.into_iter().flatten();
        for entry in looked_at.chain(of_range.into_iter().flatten()) {
            let (seq, event) = entry?;
            scanned += 1;
            last = seq;
            if let Some(event) = event.filter(|e| query.matches(e)) {
                page.events.push(event);
            }
            if page.events.len() >= max || scanned >= SCAN_BUDGET {
                break;
            }
        }
        let stopped_early = page.events.len() >= max || scanned >= SCAN_BUDGET;
        if stopped_early && last < hi {
            page.next_after = Some(last);
        }
        Ok(page)
    }

    /// Durable events matching the query, oldest first, up to its `limit`.
    /// Holds the whole answer: for bounded questions (a limit, one node);
    /// everything else reads [`Store::history_page`] by page.
    pub fn history(&self, query: &HistoryQuery) -> Result<Vec<Event>, StoreError> {
        let limit = query.limit.unwrap_or(usize::MAX);
        let mut query = query.clone();
        let mut out = Vec::new();
        loop {
            let page = self.history_page(&query, (limit - out.len()).min(SCAN_BUDGET))?;
            out.extend(page.events);
            match page.next_after {
                Some(after) if out.len() < limit => query.after_seq = Some(after),
                _ => return Ok(out),
            }
        }
    }

    /// The seqs a query can match, first and last, within what is kept and
    /// durable; `None` when none can.
    fn seq_bounds(
        &self,
        query: &HistoryQuery,
        floor: u64,
    ) -> Result<Option<(u64, u64)>, StoreError> {
        let mut lo = query.after_seq.unwrap_or(0).max(floor).saturating_add(1);
        let mut hi = self.durable_seq();
        if let Some(since) = query.since {
            match self.first_seq_at_or_after(since)? {
                Some(seq) => lo = lo.max(seq),
                None => return Ok(None),
            }
        }
        if let Some(until) = query.until {
            match self.last_seq_at_or_before(until)? {
                Some(seq) => hi = hi.min(seq),
                None => return Ok(None),
            }
        }
        Ok((lo <= hi).then_some((lo, hi)))
    }

    /// Refuses a query about a node or condition type the store has never
    /// heard of, instead of answering "no events".
    pub fn check_query(&self, query: &HistoryQuery) -> Result<(), StoreError> {
        if let Some(node) = &query.node {
            if !self.node_is_known(node)? {
                return Err(StoreError::UnknownNode(node.clone()));
            }
        }
        if let Some(condition) = &query.condition {
            let known = self.condition_types()?;
            if !known.iter().any(|k| k.eq_ignore_ascii_case(condition)) {
                return Err(StoreError::UnknownCondition {
                    condition: condition.clone(),
                    known: known.join(", "),
                });
            }
        }
        Ok(())
    }

    /// Whether the node is registered, or the kept history has an event about it.
    pub fn node_is_known(&self, name: &str) -> Result<bool, StoreError> {
        if self.nodes.contains_key(name.as_bytes())? {
            return Ok(true);
        }
        let mut prefix = name.as_bytes().to_vec();
        prefix.push(0);
        let horizon = self.horizon();
        for entry in self.node_events.scan_prefix(&prefix) {
            let (key, value) = entry?;
            let (first, len) = super::node_index::parse_run(&key, &value)?;
            if first + len - 1 > horizon {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Every condition type known: Kubernetes' own, those the history has
    /// seen change, and those a registered node has. Sorted.
    pub fn condition_types(&self) -> Result<Vec<String>, StoreError> {
        let mut known: std::collections::BTreeSet<String> =
            STANDARD_CONDITIONS.iter().map(|c| c.to_string()).collect();
        known.extend(
            self.conditions_seen
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .cloned(),
        );
        for value in self.nodes.iter().values() {
            let node = records::decode_node(&value?)?;
            known.extend(node.conditions.into_iter().map(|c| c.kind));
        }
        Ok(known.into_iter().collect())
    }
}
