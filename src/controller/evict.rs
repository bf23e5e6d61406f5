//! Carrying out eviction decisions: taints that follow Ready, the
//! `EvictionStarted` event, and the `--eviction-hook` run with the node's
//! name and reason (its result is `EvictionDone`).

use std::time::Duration;

use tokio::time::Instant;

use super::eviction::wanted_taints;
use super::Controller;
use crate::model::EvictionMode;
use crate::model::{EventKind, Micros};
use crate::store::Batch;

impl Controller {
    /// Runs every monitor period: taints follow Ready, due nodes are evicted
    /// at their zone's rate.
    /// Over 80 lines: the zones' states, the taints and the evictions are
    /// decided from one look at every node and written as one batch.
    pub(super) async fn eviction_pass(&mut self) {
        let config = self.config.eviction.clone();
        if config.mode == EvictionMode::None {
            return;
        }
        let now = self.clock.now();
        let wall = Micros::now();
        self.resume_interrupted(now, &config).await;
        let pass = self.evictor.pass(
            self.tracked.values().map(|t| &*t.node),
            &config,
            self.started,
            now,
        );
        let mut batch = Batch::new(wall);
        // Taints alone follow Ready again at the next pass if refused, so
        // they are written a chunk at a time (see [`super::WRITE_CHUNK`]).
        let mut taint_batches: Vec<Batch> = Vec::new();
        let mut hooks = Vec::new();
        for (name, t) in &self.tracked {
            let evict = pass.evict.iter().find(|(n, _)| n == name);
            let taints = wanted_taints(&t.node, self.evictor.is_evicted(name), config.mode, wall);
            let mut events = Vec::new();
            if taints != t.node.taints {
                events.push(EventKind::TaintsChanged {
                    from: t.node.taints.clone(),
                    to: taints.clone(),
                });
            }
            if let Some((_, reason)) = evict {
                tracing::warn!(node = %name, reason, mode = config.mode.as_str(), "evicting");
                events.push(EventKind::EvictionStarted {
                    reason: reason.clone(),
                    mode: config.mode,
                });
                self.metrics.evictions.inc();
                if let Some(hook) = &config.hook {
                    hooks.push((name.clone(), reason.clone(), hook.clone()));
                }
            }
            if events.is_empty() {
                continue;
            }
            let mut node = t.node.clone();
            node.taints = taints;
            if evict.is_some() {
                batch.record(node, events);
                continue;
            }
            if taint_batches
                .last()
                .is_none_or(|b| b.len() >= super::WRITE_CHUNK)
            {
                taint_batches.push(Batch::new(wall));
            }
            taint_batches
                .last_mut()
                .expect("pushed above")
                .record(node, events);
        }
        for taints in taint_batches {
            if let Err(e) = self.commit(taints).await {
                // The evictions wait for the store as well: decided again next pass.
                for (name, _) in &pass.evict {
                    self.evictor.forget(name);
                }
                return super::log_unstored("taint changes", &e);
            }
        }
        if batch.is_empty() {
            return;
        }
        // The decision is durable before anything acts on it.
        if let Err(e) = self.commit(batch).await {
            // Not recorded, so not done: the next pass decides again.
            for (name, _) in &pass.evict {
                self.evictor.forget(name);
            }
            return super::log_unstored("eviction decisions", &e);
        }
        for (name, reason, hook) in hooks {
            let timeout = config.hook_timeout;
            self.hooks.spawn(async move {
                let result = run_hook(&hook, &name, &reason, timeout).await;
                (name, result)
            });
        }
    }

    /// Re-runs hooks a crash or stop interrupted, once a grace period after
    /// the start has told the node's real state; a node that came back is
    /// left alone (and that is recorded).
    async fn resume_interrupted(&mut self, now: Instant, config: &super::eviction::EvictionConfig) {
        if self.interrupted.is_empty()
            || now.saturating_duration_since(self.started) < self.config.node_monitor_grace_period
        {
            return;
        }
        let Some(hook) = config.hook.clone() else {
            return;
        };
        let mut batch = Batch::new(Micros::now());
        for (name, reason) in std::mem::take(&mut self.interrupted) {
            let still_down = self
                .tracked
                .get(&name)
                .is_some_and(|t| t.node.ready() != crate::model::ConditionStatus::True);
            if !still_down {
                batch.node_event(
                    &name,
                    EventKind::EvictionDone {
                        result: "not resumed: the node is Ready again".into(),
                    },
                );
                continue;
            }
            tracing::warn!(node = %name, "resuming an eviction hook a stop interrupted");
            let reason = format!("{reason} (resumed after a controller restart)");
            let timeout = config.hook_timeout;
            let hook = hook.clone();
            self.hooks.spawn(async move {
                let result = run_hook(&hook, &name, &reason, timeout).await;
                (name, result)
            });
        }
        if !batch.is_empty() {
            if let Err(e) = self.commit(batch).await {
                super::log_unstored("eviction results", &e);
            }
        }
    }

    /// Records what a hook did (later, if the store refuses it now: it must
    /// not look interrupted after a restart).
    pub(super) async fn after_hook(&mut self, name: &str, result: String) {
        self.record_events(vec![(
            Some(name.to_string()),
            EventKind::EvictionDone { result },
        )])
        .await;
    }
}

/// Runs `sh -c HOOK` with the node name and reason as `$1` and `$2` (and in
/// `NODEKEEPER_NODE` / `NODEKEEPER_REASON`), within `timeout`; says how it went.
async fn run_hook(hook: &str, node: &str, reason: &str, timeout: Duration) -> String {
    let run = crate::hook::HookRun {
        name: "nodekeeper-eviction-hook",
        args: vec![node.to_string(), reason.to_string()],
        env: vec![
            ("NODEKEEPER_NODE", node.to_string()),
            ("NODEKEEPER_REASON", reason.to_string()),
        ],
        stdin: None,
    };
    crate::hook::run(hook, run, timeout).await.to_string()
}
