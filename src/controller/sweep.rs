//! One probe sweep: the ancestor's `SyncProbedNodeStatus`. The probing runs
//! in a task of its own so pushes are answered while kubelets are slow; the
//! answers come back to the controller, which decides and stores.

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::conditions::{after_probe, apply};
use super::CommitError;
use super::{Controller, StatusMode};
use crate::metrics::{ProbeLabels, ProbeResult};
use crate::model::{Micros, READY};
use crate::probe::{ProbeOutcome, ProbeTarget, Prober};
use crate::store::Batch;

/// What a sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub probed: usize,
    pub healthy: usize,
    pub transitions: usize,
    pub elapsed: Duration,
}

/// One probe's result.
pub(super) struct Answer {
    name: String,
    outcome: ProbeOutcome,
    latency: Duration,
    wall: Micros,
    at: Instant,
    sweep_started: Instant,
}

impl Controller {
    /// Starts probing every node that is not watched through its own
    /// heartbeats (all of them in probe mode; none in push mode).
    pub(super) fn start_sweep(&self) -> JoinHandle<Vec<Answer>> {
        let mode = self.config.status_mode;
        let targets: Vec<(String, Option<Arc<ProbeTarget>>)> = self
            .tracked
            .iter()
            .filter(|(_, t)| match mode {
                StatusMode::Probe => true,
                StatusMode::Hybrid => !t.health.pushing,
                StatusMode::Push => false,
            })
            .map(|(name, t)| (name.clone(), t.target.clone()))
            .collect();
        let Some(prober) = self.prober.clone() else {
            // Push mode probes nothing.
            return tokio::spawn(async { Vec::new() });
        };
        let concurrency = self.config.probe_concurrency.max(1);
        tokio::spawn(probe_all(prober, targets, concurrency))
    }

    /// Decides Ready for each answer and stores the transitions with their
    /// events. Returns after they are durable (and only then publishes
    /// them), so what readers see survives a crash.
    pub(super) async fn apply_sweep(
        &mut self,
        answers: Vec<Answer>,
    ) -> Result<SweepReport, CommitError> {
        let now = Micros::now();
        let grace = self.config.node_monitor_grace_period;
        let mode = self.config.status_mode;
        let mut batch = Batch::new(now);
        let mut report = SweepReport {
            probed: answers.len(),
            ..SweepReport::default()
        };
        // Logged once stored: a refused decision is made (and logged) again.
        let mut decided = Vec::new();
        for answer in &answers {
            let result = match answer.outcome {
                ProbeOutcome::Healthy => ProbeResult::Healthy,
                ProbeOutcome::Unhealthy { .. } => ProbeResult::Unhealthy,
                ProbeOutcome::NoAnswer { .. } => ProbeResult::NoAnswer,
            };
            if result == ProbeResult::Healthy {
                report.healthy += 1;
            }
            self.metrics
                .probes
                .get_or_create(&ProbeLabels { result })
                .inc();
            self.metrics
                .probe_duration
                .observe(answer.latency.as_secs_f64());
            let Some(tracked) = self.tracked.get_mut(&answer.name) else {
                continue;
            };
            if mode == StatusMode::Hybrid && tracked.health.pushing {
                // It started pushing while the sweep was out; its heartbeats decide.
                continue;
            }
            let current = tracked.node.ready();
            let Some(verdict) = after_probe(
                current,
                &answer.outcome,
                &mut tracked.health,
                answer.at,
                answer.wall,
                grace,
            ) else {
                continue;
            };
            let mut node = tracked.node.clone();
            decided.push((node.name.clone(), current, verdict.clone()));
            let event = apply(&mut node, READY, verdict, now, tracked.health.last_answer);
            batch.record(node, [event]);
        }
        // A refused commit leaves the decisions to the next sweep; the rest
        // of what a sweep tells (answer times, metrics) holds either way.
        let stored = if batch.is_empty() {
            Ok(())
        } else {
            self.commit(batch)
                .await
                .map(|written| report.transitions = written.nodes.len())
        };
        if stored.is_ok() {
            for (node, from, verdict) in decided {
                tracing::info!(%node, %from, to = %verdict.status, reason = verdict.reason, "{}", verdict.message);
            }
        }
        self.view
            .beat(answers.iter().filter_map(|a| match a.outcome {
                ProbeOutcome::NoAnswer { .. } => None,
                _ => Some((a.name.as_str(), a.wall)),
            }));
        // The store's size is read when /metrics is scraped, not on every sweep.
        self.update_gauges();
        report.elapsed = answers
            .first()
            .map_or(Duration::ZERO, |a| a.sweep_started.elapsed());
        if !answers.is_empty() {
            self.metrics
                .sweep_duration
                .observe(report.elapsed.as_secs_f64());
        }
        stored.map(|()| report)
    }
}

/// Probes every target, a bounded number at a time; answers sorted by name.
async fn probe_all(
    prober: Prober,
    targets: Vec<(String, Option<Arc<ProbeTarget>>)>,
    concurrency: usize,
) -> Vec<Answer> {
    let sweep_started = Instant::now();
    let prober = &prober;
    let mut answers: Vec<Answer> = stream::iter(targets)
        .map(|(name, target)| async move {
            let begun = Instant::now();
            let outcome = match &target {
                Some(target) => prober.probe(target).await,
                None => ProbeOutcome::NoAnswer {
                    error: "no address known for the node".into(),
                },
            };
            let at = Instant::now();
            Answer {
                name,
                outcome,
                latency: at - begun,
                wall: Micros::now(),
                at,
                sweep_started,
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    // Answers arrive in completion order; history reads better by name.
    answers.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    answers
}
