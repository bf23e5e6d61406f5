//! `--transition-hook`: a command run for the condition transitions, in
//! seq order, once: one transition a run (`--transition-hook-mode each`,
//! the default), or all that are waiting, up to [`BATCH_MAX`], as JSON lines
//! on its stdin (`batch`), so a slow hook keeps up with a site-wide burst.
//! The last seq handed over is kept in the store (flushed after the command
//! returns), so a restart resumes where the hook stopped and replays what
//! happened while it was down or still running. The history is read a page
//! at a time: a backlog costs disk, not memory. docs/guide/hooks.md is the
//! hook author's guide; docs/decisions/transition-hook-batches.md says why
//! batches.

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

/// Transitions one batch run is given at most.
pub const BATCH_MAX: usize = 1000;

/// A batch ends once its JSON lines reach this many bytes (a message may be
/// 32 KiB), so what a run is given stays bounded in memory.
pub const BATCH_BYTES: usize = 1 << 20;

/// A hook run one transition at a time this many events behind is warned
/// about (at most every [`BEHIND_WARNING_EVERY`]).
const BEHIND_WARNING: u64 = 1000;
const BEHIND_WARNING_EVERY: Duration = Duration::from_secs(600);

/// Waits before trying a failed store read or write again: 1 s doubling to 30 s.
const STORE_RETRY: Backoff = Backoff::exponential(Duration::from_secs(1), Duration::from_secs(30));

/// `--transition-hook`, its timeout and its mode.
#[derive(Debug, Clone)]
pub struct TransitionHookConfig {
    pub command: String,
    pub timeout: Duration,
    pub mode: TransitionHookMode,
    /// `--site`, passed as `NODEKEEPER_SITE` when given.
    pub site: Option<String>,
}

/// How transitions are handed to the hook (`--transition-hook-mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum TransitionHookMode {
    /// One run a transition: `$1`…`$6`, `NODEKEEPER_*` and the event on stdin.
    #[default]
    Each,
    /// One run for all that are waiting (up to 1,000): one event a line on
    /// stdin, `NODEKEEPER_COUNT`, `NODEKEEPER_FIRST_SEQ`, `NODEKEEPER_LAST_SEQ`.
    Batch,
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
    /// When a hook run one transition at a time was last said to be behind.
    warned_behind: Option<Instant>,
}

/// What the history holds after the cursor, read for the hook's mode.
enum Waiting {
    /// The next page of events: each transition on it is a run.
    Each(Vec<Event>),
    /// The transitions of the next run.
    Batch(Batch),
}

/// Transitions waiting, as one batch run is given them.
#[derive(Debug, Default)]
struct Batch {
    /// One event a line, as `/v1/history` shows it.
    lines: Vec<u8>,
    count: usize,
    first: u64,
    last: u64,
    /// When the oldest happened.
    oldest: Option<Micros>,
    /// The seq of the last event looked at: the batch's last transition,
    /// or, when the history up to the durable seq was read, its last event.
    through: u64,
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
            warned_behind: None,
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
            // Pages of events that are not transitions are read without a
            // wait in between: other tasks get their turn.
            tokio::task::consume_budget().await;
            // Marked seen before the store is read: a seq published after
            // this wakes the wait below.
            self.durable.borrow_and_update();
            let durable = self.store.durable_seq();
            self.pass_over_pruned();
            let pending = durable.saturating_sub(self.cursor);
            self.metrics.hook_pending.set(pending as i64);
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
            let read = match self.config.mode {
                TransitionHookMode::Each => {
                    self.warn_if_behind(pending);
                    self.page_after(self.cursor).map(Waiting::Each)
                }
                TransitionHookMode::Batch => self.read_batch().map(Waiting::Batch),
            };
            let waiting = match read {
                Ok(waiting) => waiting,
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
            let carry_on = match waiting {
                Waiting::Each(page) => self.hand_over_each(&page, durable, &stop).await,
                Waiting::Batch(batch) => self.hand_over_batch(batch, durable, &stop).await,
            };
            if !carry_on {
                return Ok(());
            }
        }
    }

    /// History pruned before the hook saw it is passed over, and said so.
    fn pass_over_pruned(&mut self) {
        let horizon = self.store.horizon();
        if self.cursor >= horizon {
            return;
        }
        tracing::error!(
            "the history from seq {} to {horizon} was pruned before the transition hook saw it, and the transitions in it are not handed over; keep more history (--history-retention, --history-max-bytes), or let a slow hook take the waiting transitions in one run (--transition-hook-mode batch)",
            self.cursor + 1
        );
        self.cursor = horizon;
        // Kept with the next flush: passing over it again after a crash says it again.
        let _ = self.store.meta_put(CURSOR_KEY, &self.cursor.to_be_bytes());
    }

    /// Says, now and then, that a hook run one transition at a time is far
    /// behind, and what would let it keep up.
    fn warn_if_behind(&mut self, pending: u64) {
        if pending < BEHIND_WARNING
            || self
                .warned_behind
                .is_some_and(|at| at.elapsed() < BEHIND_WARNING_EVERY)
        {
            return;
        }
        self.warned_behind = Some(Instant::now());
        tracing::warn!(
            pending,
            "the transition hook is {pending} events behind, running one transition at a time; a hook that cannot keep up can take all that are waiting in one run: --transition-hook-mode batch (docs/guide/hooks.md)"
        );
    }

    /// The transitions after the cursor, up to [`BATCH_MAX`] or
    /// [`BATCH_BYTES`], read a page at a time.
    fn read_batch(&self) -> Result<Batch, StoreError> {
        let mut batch = Batch {
            through: self.cursor,
            ..Batch::default()
        };
        loop {
            let page = self.page_after(batch.through)?;
            for event in &page {
                if matches!(event.kind, EventKind::ConditionChanged { .. }) {
                    if batch.count == BATCH_MAX || batch.lines.len() >= BATCH_BYTES {
                        return Ok(batch);
                    }
                    if batch.count == 0 {
                        batch.first = event.seq;
                        batch.oldest = Some(event.time);
                    }
                    batch.count += 1;
                    batch.last = event.seq;
                    batch
                        .lines
                        .extend(serde_json::to_vec(event).unwrap_or_default());
                    batch.lines.push(b'\n');
                }
                batch.through = event.seq;
            }
            if page.len() < PAGE {
                return Ok(batch);
            }
        }
    }

    /// Up to a page of the history after `seq`.
    fn page_after(&self, seq: u64) -> Result<Vec<Event>, StoreError> {
        self.store.history(&HistoryQuery {
            after_seq: Some(seq),
            limit: Some(PAGE),
            ..HistoryQuery::default()
        })
    }

    /// Runs the hook for each transition on `page`, keeping the cursor after
    /// each; false once `stop` came while the cursor could not be kept.
    async fn hand_over_each(
        &mut self,
        page: &[Event],
        durable: u64,
        stop: &CancellationToken,
    ) -> bool {
        let Some(last) = page.last().map(|e| e.seq) else {
            // Nothing left up to the durable seq (pruned, say).
            self.cursor = durable;
            return true;
        };
        for event in page {
            if matches!(event.kind, EventKind::ConditionChanged { .. }) {
                let outcome = self.run_command(transition_run(event), event.time).await;
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
                self.cursor = event.seq;
                if !self.keep_cursor(stop).await {
                    return false;
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
        true
    }

    /// Runs the hook once for `batch` and keeps the cursor after it; false
    /// once `stop` came while the cursor could not be kept.
    async fn hand_over_batch(
        &mut self,
        batch: Batch,
        durable: u64,
        stop: &CancellationToken,
    ) -> bool {
        let Some(oldest) = batch.oldest else {
            // Only other events up to the durable seq, or none (pruned, say):
            // kept with the next flush, and harmless to pass over again.
            self.cursor = batch.through.max(durable);
            let _ = self.store.meta_put(CURSOR_KEY, &self.cursor.to_be_bytes());
            return true;
        };
        let (count, first, last, through) = (batch.count, batch.first, batch.last, batch.through);
        let outcome = self.run_command(batch_run(batch), oldest).await;
        match &outcome {
            HookOutcome::Succeeded { .. } => {
                tracing::debug!(count, first_seq = first, last_seq = last, "{outcome}")
            }
            // Not run again: it may have done part of its work.
            _ => tracing::error!(
                count,
                first_seq = first,
                last_seq = last,
                "the transition hook failed and is not run again for these {count} transitions (seq {first} to {last}): {outcome}"
            ),
        }
        self.cursor = through;
        self.keep_cursor(stop).await
    }

    /// Runs the hook command, counts how it went and how long it took;
    /// `oldest` is when the oldest transition it is given happened.
    async fn run_command(&self, mut run: HookRun, oldest: Micros) -> HookOutcome {
        // Both modes: which site the transitions are of.
        if let Some(site) = &self.config.site {
            run.env.push(("NODEKEEPER_SITE", site.clone()));
        }
        let lag = (Micros::now().0 - oldest.0).max(0) as f64 / 1e6;
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

/// What a batch run is given: no arguments; `NODEKEEPER_COUNT`,
/// `NODEKEEPER_FIRST_SEQ` and `NODEKEEPER_LAST_SEQ`; on stdin, each
/// transition's event as `/v1/history` shows it, one a line, in seq order.
fn batch_run(batch: Batch) -> HookRun {
    HookRun {
        name: "nodekeeper-transition-hook",
        args: Vec::new(),
        env: vec![
            ("NODEKEEPER_COUNT", batch.count.to_string()),
            ("NODEKEEPER_FIRST_SEQ", batch.first.to_string()),
            ("NODEKEEPER_LAST_SEQ", batch.last.to_string()),
        ],
        stdin: Some(batch.lines),
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
    let mut run = HookRun::with_args(
        "nodekeeper-transition-hook",
        vec![
            ("NODEKEEPER_NODE", event.node.clone().unwrap_or_default()),
            ("NODEKEEPER_CONDITION", condition.clone()),
            ("NODEKEEPER_FROM", status_name(*from).to_string()),
            ("NODEKEEPER_TO", status_name(Some(*to)).to_string()),
            ("NODEKEEPER_REASON", reason.clone()),
            ("NODEKEEPER_SEQ", event.seq.to_string()),
        ],
    );
    run.env.push(("NODEKEEPER_MESSAGE", message.clone()));
    run.env.push(("NODEKEEPER_TIME", event.time.rfc3339()));
    run.stdin = Some(serde_json::to_vec(event).unwrap_or_default());
    run
}

#[cfg(test)]
mod tests {
    //! On a real store, with real hook commands: the clock that matters is
    //! the processes', so these wait in real time, bounded.
    use super::*;
    use crate::model::ConditionStatus;
    use crate::store::{Batch as Changes, StoreOptions};
    use std::path::Path;

    /// How long a test waits for the hook before it fails.
    const DEADLINE: Duration = Duration::from_secs(60);

    struct Site {
        dir: tempfile::TempDir,
        store: Arc<Store>,
        durable: watch::Sender<u64>,
        metrics: Arc<Metrics>,
    }

    impl Site {
        fn new() -> Site {
            let dir = tempfile::tempdir().unwrap();
            let store = Store::open(&dir.path().join("db"), &StoreOptions::default()).unwrap();
            Site {
                dir,
                store: Arc::new(store),
                durable: watch::channel(0).0,
                metrics: Arc::new(Metrics::new()),
            }
        }

        fn path(&self, name: &str) -> std::path::PathBuf {
            self.dir.path().join(name)
        }

        /// Writes `count` transitions over 100 nodes (each after an event
        /// that is not one), at `time`, durably; returns their seqs.
        async fn transitions(&self, count: usize, time: Micros) -> Vec<u64> {
            let mut changes = Changes::new(time);
            for i in 0..count {
                let node = format!("edge-{}", i % 100);
                changes.node_event(
                    &node,
                    EventKind::AddressLookupFailed {
                        message: "not a transition".into(),
                    },
                );
                changes.node_event(
                    &node,
                    EventKind::ConditionChanged {
                        condition: "Ready".into(),
                        from: Some(ConditionStatus::True),
                        to: ConditionStatus::Unknown,
                        reason: "NodeStatusUnknown".into(),
                        message: format!("transition {i}"),
                    },
                );
            }
            let written = self.store.write(changes).unwrap();
            let durable = self.store.flush().await.unwrap();
            self.durable.send_replace(durable);
            written
                .events
                .iter()
                .filter(|e| matches!(e.kind, EventKind::ConditionChanged { .. }))
                .map(|e| e.seq)
                .collect()
        }

        /// Writes `count` events that are not transitions, durably.
        async fn others(&self, count: usize) {
            let mut changes = Changes::new(Micros::now());
            for _ in 0..count {
                changes.node_event(
                    "edge-0",
                    EventKind::AddressLookupFailed {
                        message: "not a transition".into(),
                    },
                );
            }
            self.store.write(changes).unwrap();
            self.durable.send_replace(self.store.flush().await.unwrap());
        }

        async fn hook(&self, command: String, mode: TransitionHookMode) -> TransitionHook {
            let config = TransitionHookConfig {
                command,
                timeout: Duration::from_secs(30),
                mode,
                site: Some("site-a".into()),
            };
            let durable = self.durable.subscribe();
            TransitionHook::start(config, self.store.clone(), durable, self.metrics.clone())
                .await
                .unwrap()
        }

        /// Waits until the hook is done with `seq`.
        async fn hooked_through(&self, seq: u64) {
            let started = Instant::now();
            while self.metrics.hook_last_seq.get() < seq as i64 {
                assert!(
                    started.elapsed() < DEADLINE,
                    "the hook is done with seq {} of {seq}",
                    self.metrics.hook_last_seq.get()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    /// Runs `hook` until it is done with `seq`; what it logged, as text.
    async fn logged_while(hook: TransitionHook, site: &Site, seq: u64) -> String {
        let sink = crate::logging::tests::Sink::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(sink.clone())
            .with_ansi(false)
            .finish();
        let stop = CancellationToken::new();
        let until_done = async {
            site.hooked_through(seq).await;
            stop.cancel();
        };
        let (ran, ()) = tracing::instrument::WithSubscriber::with_subscriber(
            async { tokio::join!(hook.run(stop.clone()), until_done) },
            subscriber,
        )
        .await;
        ran.unwrap();
        sink.text()
    }

    /// An each-mode hook that appends the event it is given, a line each.
    fn each_recorder(dir: &Path) -> String {
        // `:` takes the arguments sh -c passes on.
        format!(
            "cat >> {d}/events; echo >> {d}/events; :",
            d = dir.display()
        )
    }

    /// A batch hook that takes `sleep` seconds a run, then appends each
    /// event it is given to `events`, and `COUNT FIRST LAST $#` to `runs`.
    fn batch_recorder(dir: &Path, sleep: &str) -> String {
        format!(
            r#"sleep {sleep}; cat >> {d}/events; echo "$NODEKEEPER_COUNT $NODEKEEPER_FIRST_SEQ $NODEKEEPER_LAST_SEQ $#" >> {d}/runs"#,
            d = dir.display()
        )
    }

    /// The seqs of the events a recorder was given, in order.
    fn recorded_seqs(file: &Path) -> Vec<u64> {
        #[allow(clippy::disallowed_methods)] // a test's file, read once it is written
        let text = std::fs::read_to_string(file).unwrap_or_default();
        text.lines()
            .map(|l| {
                let event: serde_json::Value = serde_json::from_str(l).unwrap();
                assert_eq!(event["kind"], "ConditionChanged", "{l}");
                event["seq"].as_u64().unwrap()
            })
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_of_5000_transitions_takes_a_handful_of_runs_of_a_slow_batch_hook() {
        // One transition a run, this hook (0.2 s a run) would take 5,000
        // runs and over 1,000 s; in batches it takes ceil(5,000 / 1,000)
        // runs and one more for each time the burst was cut.
        let site = Site::new();
        let hook = site
            .hook(
                batch_recorder(site.dir.path(), "0.2"),
                TransitionHookMode::Batch,
            )
            .await;
        let stop = CancellationToken::new();
        let started = Instant::now();
        let running = tokio::spawn(hook.run(stop.clone()));
        // Half the burst before the hook looks, half while it runs.
        let mut want = site.transitions(2_500, Micros::now()).await;
        want.extend(site.transitions(2_500, Micros::now()).await);
        site.hooked_through(*want.last().unwrap()).await;
        let took = started.elapsed();
        stop.cancel();
        running.await.unwrap().unwrap();

        assert_eq!(
            recorded_seqs(&site.path("events")),
            want,
            "each once, in order"
        );
        #[allow(clippy::disallowed_methods)] // a test's file, read once it is written
        let runs = std::fs::read_to_string(site.path("runs")).unwrap();
        let runs: Vec<Vec<u64>> = runs
            .lines()
            .map(|l| l.split(' ').map(|n| n.parse().unwrap()).collect())
            .collect();
        assert!(runs.len() <= 7, "{} runs: {runs:?}", runs.len());
        let mut next = 0;
        for run in &runs {
            let [count, first, last, args] = run[..] else {
                panic!("{run:?}");
            };
            assert!(count as usize <= BATCH_MAX, "{run:?}");
            assert_eq!(args, 0, "a batch run has no arguments");
            assert_eq!((first, last), (want[next], want[next + count as usize - 1]));
            next += count as usize;
        }
        assert_eq!(next, want.len());
        assert!(took < DEADLINE, "took {took:?}");
        assert_eq!(site.metrics.hook_pending.get(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn both_modes_name_the_site_in_the_environment() {
        for mode in [TransitionHookMode::Each, TransitionHookMode::Batch] {
            let site = Site::new();
            let d = site.dir.path().display().to_string();
            let hook = site
                .hook(
                    // `:` takes the arguments sh -c passes on.
                    format!("cat > /dev/null; echo \"$NODEKEEPER_SITE\" >> {d}/sites; :"),
                    mode,
                )
                .await;
            let stop = CancellationToken::new();
            let running = tokio::spawn(hook.run(stop.clone()));
            let want = site.transitions(2, Micros::now()).await;
            site.hooked_through(*want.last().unwrap()).await;
            stop.cancel();
            running.await.unwrap().unwrap();
            #[allow(clippy::disallowed_methods)] // a test's file, read once it is written
            let sites = std::fs::read_to_string(site.path("sites")).unwrap();
            assert!(!sites.is_empty(), "{mode:?}: the hook ran");
            assert!(sites.lines().all(|l| l == "site-a"), "{mode:?}: {sites:?}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_hook_resumes_after_a_stop_and_runs_a_batch_a_crash_cut_again() {
        let site = Site::new();
        let d = site.dir.path().display().to_string();
        // Waits while `block` exists, says it started, then records.
        let command = format!(
            "echo > {d}/started; while [ -e {d}/block ]; do sleep 0.02; done; {}",
            batch_recorder(site.dir.path(), "0")
        );
        let hook = site.hook(command.clone(), TransitionHookMode::Batch).await;
        let stop = CancellationToken::new();
        let running = tokio::spawn(hook.run(stop.clone()));
        let mut want = site.transitions(10, Micros::now()).await;
        site.hooked_through(*want.last().unwrap()).await;
        stop.cancel();
        running.await.unwrap().unwrap();

        // Written while no hook runs; the next one blocks and is cut short
        // (as by a crash: its task is dropped, its command killed).
        want.extend(site.transitions(5, Micros::now()).await);
        #[allow(clippy::disallowed_methods)] // test set-up, outside the hook's path
        {
            std::fs::write(site.path("block"), "").unwrap();
            std::fs::remove_file(site.path("started")).unwrap();
        }
        let hook = site.hook(command.clone(), TransitionHookMode::Batch).await;
        assert_eq!(hook.cursor(), want[9], "resumes after the last batch done");
        let running = tokio::spawn(hook.run(CancellationToken::new()));
        let started = Instant::now();
        while !site.path("started").exists() {
            assert!(started.elapsed() < DEADLINE, "the hook never started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        running.abort();
        let _ = running.await;
        #[allow(clippy::disallowed_methods)] // test set-up, outside the hook's path
        std::fs::remove_file(site.path("block")).unwrap();

        let hook = site.hook(command, TransitionHookMode::Batch).await;
        assert_eq!(hook.cursor(), want[9], "the cut batch was not done");
        let stop = CancellationToken::new();
        let running = tokio::spawn(hook.run(stop.clone()));
        site.hooked_through(*want.last().unwrap()).await;
        stop.cancel();
        running.await.unwrap().unwrap();
        assert_eq!(
            recorded_seqs(&site.path("events")),
            want,
            "each once, in order"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn history_pruned_before_the_hook_saw_it_is_passed_over_and_said_so() {
        let site = Site::new();
        let hook = site
            .hook(each_recorder(site.dir.path()), TransitionHookMode::Each)
            .await;
        // An hour old, then pruned by a retention of ten minutes.
        let old = site
            .transitions(3, Micros(Micros::now().0 - 3_600_000_000))
            .await;
        let config = crate::store::RetentionConfig {
            max_age: Some(Duration::from_secs(600)),
            max_bytes: None,
        };
        let mut tail = crate::store::retention::TailBytes::default();
        while site
            .store
            .retention_step(&config, Micros::now(), &mut tail)
            .unwrap()
            .more
        {}
        assert!(site.store.horizon() >= *old.last().unwrap());
        let kept = site.transitions(2, Micros::now()).await;

        let log = logged_while(hook, &site, *kept.last().unwrap()).await;
        assert_eq!(recorded_seqs(&site.path("events")), kept);
        assert!(
            log.contains(&format!(
                "the history from seq 1 to {} was pruned before the transition hook saw it",
                site.store.horizon()
            )),
            "{log}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hook_far_behind_one_transition_at_a_time_says_what_would_keep_up() {
        let site = Site::new();
        let hook = site
            .hook(each_recorder(site.dir.path()), TransitionHookMode::Each)
            .await;
        site.others(1_500).await;
        let want = site.transitions(3, Micros::now()).await;
        let log = logged_while(hook, &site, *want.last().unwrap()).await;
        assert_eq!(recorded_seqs(&site.path("events")), want);
        // Read a page at a time, it is behind by 1,000 or more twice: said once.
        assert_eq!(log.matches("events behind").count(), 1, "{log}");
        assert!(
            log.contains("the transition hook is 1506 events behind"),
            "{log}"
        );
        assert!(log.contains("--transition-hook-mode batch"), "{log}");
    }
}
