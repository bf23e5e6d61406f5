//! `--transition-hook`: a command run for every condition transition, in
//! seq order, once. The last seq handed over is kept in the store (flushed
//! after the command returns), so a restart resumes where the hook stopped
//! and replays what happened while it was down or still running. The
//! history is read a page at a time: a backlog costs disk, not memory.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{HookOutcome, HookRun};
use crate::backoff::Backoff;
use crate::logging::status_name;
use crate::metrics::{HookResult, HookRunLabels, Metrics};
use crate::model::{Event, EventKind, Micros};
use crate::store::{HistoryQuery, Store, StoreError};

/// The meta key holding the seq of the last event the hook is done with
/// (8 bytes, big-endian).
pub const CURSOR_KEY: &[u8] = b"transition-hook/last-seq";

/// Events read from the history at a time.
pub const PAGE: usize = 256;

/// The default of `--transition-hook-timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Waits before trying a failed store read or write again: 1 s doubling to 30 s.
const STORE_RETRY: Backoff = Backoff::exponential(Duration::from_secs(1), Duration::from_secs(30));

/// `--transition-hook` and its timeout.
#[derive(Debug, Clone)]
pub struct TransitionHookConfig {
    pub command: String,
    pub timeout: Duration,
}

/// Hands every durable transition to the hook command, in order.
pub struct TransitionHook {
    config: TransitionHookConfig,
    store: Arc<Store>,
    /// Follows the durable seq the store writer publishes.
    durable: watch::Receiver<u64>,
    metrics: Arc<Metrics>,
    /// The seq of the last event the hook is done with.
    cursor: u64,
}

impl TransitionHook {
    /// Reads where the hook stopped. A store that never had a hook starts at
    /// its newest event (durably), so turning a hook on does not replay the
    /// past; every transition from this start on is handed over.
    pub async fn start(
        config: TransitionHookConfig,
        store: Arc<Store>,
        durable: watch::Receiver<u64>,
        metrics: Arc<Metrics>,
    ) -> Result<TransitionHook, StoreError> {
        let stored = store
            .meta_get(CURSOR_KEY)?
            .and_then(|bytes| Some(u64::from_be_bytes(bytes.as_slice().try_into().ok()?)));
        let cursor = match stored {
            Some(seq) => {
                let behind = store.last_seq().saturating_sub(seq);
                tracing::info!(
                    seq,
                    behind,
                    "transition hook resumes after the last transition it was given"
                );
                seq
            }
            None => {
                let seq = store.last_seq();
                store.meta_put(CURSOR_KEY, &seq.to_be_bytes())?;
                store.flush().await?;
                seq
            }
        };
        metrics.hook_last_seq.set(cursor as i64);
        Ok(TransitionHook {
            config,
            store,
            durable,
            metrics,
            cursor,
        })
    }

    /// The seq of the last event the hook is done with.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// Runs until `stop`. A hook running then is let finish (within its
    /// timeout) and its place kept, so it is not run again.
    pub async fn run(mut self, stop: CancellationToken) -> Result<(), String> {
        let mut retries = STORE_RETRY.retries();
        loop {
            if stop.is_cancelled() {
                return Ok(());
            }
            // Marked seen before the store is read: a seq published after
            // this wakes the wait below.
            self.durable.borrow_and_update();
            let durable = self.store.durable_seq();
            self.metrics
                .hook_pending
                .set(durable.saturating_sub(self.cursor) as i64);
            if self.cursor >= durable {
                self.metrics.hook_lag.set(0.0);
                tokio::select! {
                    _ = stop.cancelled() => return Ok(()),
                    changed = self.durable.changed() => {
                        if changed.is_err() {
                            // Nothing more will be written.
                            stop.cancelled().await;
                            return Ok(());
                        }
                    }
                }
                continue;
            }
            let query = HistoryQuery {
                after_seq: Some(self.cursor),
                limit: Some(PAGE),
                ..HistoryQuery::default()
            };
            let page = match self.store.history(&query) {
                Ok(page) => page,
                Err(e) => {
                    let wait = retries.next_delay();
                    tracing::error!(
                        "the transition hook cannot read the history after seq {}: {e}; trying again in {}",
                        self.cursor,
                        crate::duration::format(wait)
                    );
                    if stop
                        .run_until_cancelled(tokio::time::sleep(wait))
                        .await
                        .is_none()
                    {
                        return Ok(());
                    }
                    continue;
                }
            };
            retries.reset();
            let Some(last) = page.last().map(|e| e.seq) else {
                // Nothing left up to the durable seq (pruned, say).
                self.cursor = durable;
                continue;
            };
            for event in &page {
                if matches!(event.kind, EventKind::ConditionChanged { .. }) {
                    self.hand_over(event).await;
                    self.cursor = event.seq;
                    if !self.keep_cursor(&stop).await {
                        return Ok(());
                    }
                } else {
                    self.cursor = event.seq;
                }
                if stop.is_cancelled() {
                    break;
                }
            }
            if self.cursor == last {
                // Other events passed over: kept with the next flush, and
                // harmless to pass over again after a crash.
                let _ = self.store.meta_put(CURSOR_KEY, &self.cursor.to_be_bytes());
            }
        }
    }

    /// Runs the hook for one transition and says how it went.
    async fn hand_over(&self, event: &Event) -> HookOutcome {
        let run = transition_run(event);
        let lag = (Micros::now().0 - event.time.0).max(0) as f64 / 1e6;
        self.metrics.hook_lag.set(lag);
        let started = Instant::now();
        let outcome = super::run(&self.config.command, run, self.config.timeout).await;
        self.metrics
            .hook_duration
            .observe(started.elapsed().as_secs_f64());
        let result = match &outcome {
            HookOutcome::Succeeded { .. } => HookResult::Succeeded,
            HookOutcome::TimedOut { .. } => HookResult::TimedOut,
            HookOutcome::Exited { .. } | HookOutcome::Failed { .. } => HookResult::Failed,
        };
        self.metrics
            .hook_runs
            .get_or_create(&HookRunLabels { result })
            .inc();
        let node = event.node.as_deref().unwrap_or("");
        match &outcome {
            HookOutcome::Succeeded { .. } => {
                tracing::debug!(node, seq = event.seq, "{outcome}")
            }
            // Not run again: it may have done part of its work.
            _ => tracing::error!(
                node,
                seq = event.seq,
                "the transition hook failed and is not run again for this transition: {outcome}"
            ),
        }
        outcome
    }

    /// Makes the cursor durable, trying until it is or `stop` (false).
    async fn keep_cursor(&mut self, stop: &CancellationToken) -> bool {
        let mut retries = STORE_RETRY.retries();
        loop {
            let kept = match self.store.meta_put(CURSOR_KEY, &self.cursor.to_be_bytes()) {
                Ok(()) => self.store.flush().await.map(|_| ()),
                Err(e) => Err(e),
            };
            match kept {
                Ok(()) => {
                    self.metrics.hook_last_seq.set(self.cursor as i64);
                    return true;
                }
                Err(e) => {
                    // The next hook waits: after a crash, the one just run
                    // would be run again.
                    let wait = retries.next_delay();
                    tracing::error!(
                        "the transition hook's place (seq {}) could not be stored: {e}; no further hook runs until it is, trying again in {}",
                        self.cursor,
                        crate::duration::format(wait)
                    );
                    if stop
                        .run_until_cancelled(tokio::time::sleep(wait))
                        .await
                        .is_none()
                    {
                        return false;
                    }
                }
            }
        }
    }
}

/// What the hook is given for a transition: `$1`…`$6` are node, condition,
/// from, to, reason and seq; the environment has them as `NODEKEEPER_NODE`,
/// `NODEKEEPER_CONDITION`, `NODEKEEPER_FROM`, `NODEKEEPER_TO`,
/// `NODEKEEPER_REASON`, `NODEKEEPER_SEQ`, with `NODEKEEPER_MESSAGE` and
/// `NODEKEEPER_TIME`; stdin has the event as `/v1/history` shows it.
pub fn transition_run(event: &Event) -> HookRun {
    let EventKind::ConditionChanged {
        condition,
        from,
        to,
        reason,
        message,
    } = &event.kind
    else {
        return HookRun::default();
    };
    let node = event.node.clone().unwrap_or_default();
    let from = status_name(*from).to_string();
    let to = status_name(Some(*to)).to_string();
    let seq = event.seq.to_string();
    HookRun {
        name: "nodekeeper-transition-hook",
        args: vec![
            node.clone(),
            condition.clone(),
            from.clone(),
            to.clone(),
            reason.clone(),
            seq.clone(),
        ],
        env: vec![
            ("NODEKEEPER_NODE", node),
            ("NODEKEEPER_CONDITION", condition.clone()),
            ("NODEKEEPER_FROM", from),
            ("NODEKEEPER_TO", to),
            ("NODEKEEPER_REASON", reason.clone()),
            ("NODEKEEPER_MESSAGE", message.clone()),
            ("NODEKEEPER_SEQ", seq),
            ("NODEKEEPER_TIME", event.time.rfc3339()),
        ],
        stdin: Some(serde_json::to_vec(event).unwrap_or_default()),
    }
}
