//! One probe sweep: the ancestor's `SyncProbedNodeStatus`.

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use tokio::time::Instant;

use super::conditions::{after_probe, apply};
use super::Controller;
use crate::metrics::{ConditionLabels, ProbeLabels, ProbeResult};
use crate::model::{EventKind, Micros, READY};
use crate::probe::{ProbeOutcome, ProbeTarget};
use crate::store::{Batch, StoreError};

/// What a sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub probed: usize,
    pub healthy: usize,
    pub transitions: usize,
    pub elapsed: Duration,
}

struct Answer {
    name: String,
    outcome: ProbeOutcome,
    latency: Duration,
    wall: Micros,
    at: Instant,
}

impl Controller {
    /// Probes every node once, decides Ready for each, and stores the
    /// transitions with their events. Returns after they are durable (and
    /// only then publishes them), so what readers see survives a crash.
    pub async fn probe_sweep(&mut self) -> Result<SweepReport, StoreError> {
        let started = Instant::now();
        let targets: Vec<(String, Option<Arc<ProbeTarget>>)> = self
            .tracked
            .iter()
            .map(|(name, t)| (name.clone(), t.target.clone()))
            .collect();
        let prober = &self.prober;
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
                }
            })
            .buffer_unordered(self.config.probe_concurrency.max(1))
            .collect()
            .await;
        // Answers arrive in completion order; history reads better by name.
        answers.sort_unstable_by(|a, b| a.name.cmp(&b.name));

        let now = Micros::now();
        let grace = self.config.node_monitor_grace_period;
        let mut batch = Batch::new(now);
        let mut report = SweepReport {
            probed: answers.len(),
            ..SweepReport::default()
        };
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
            tracing::info!(node = %node.name, from = %current, to = %verdict.status, reason = verdict.reason, "{}", verdict.message);
            let event = apply(&mut node, READY, verdict, now, tracked.health.last_answer);
            batch.record(node, [event]);
        }

        if !batch.is_empty() {
            let written = self.store.write(batch)?;
            self.store.flush().await?;
            for event in &written.events {
                if let EventKind::ConditionChanged { condition, to, .. } = &event.kind {
                    let labels = ConditionLabels {
                        condition: condition.clone(),
                        status: (*to).into(),
                    };
                    self.metrics.transitions.get_or_create(&labels).inc();
                }
            }
            report.transitions = written.nodes.len();
            for node in &written.nodes {
                if let Some(t) = self.tracked.get_mut(&node.name) {
                    t.node = node.clone();
                }
            }
            self.view.publish(written.nodes, &[]);
        }
        self.view
            .beat(answers.iter().filter_map(|a| match a.outcome {
                ProbeOutcome::NoAnswer { .. } => None,
                _ => Some((a.name.as_str(), a.wall)),
            }));
        self.update_gauges();
        self.metrics
            .store_size
            .set(self.store.size_on_disk() as i64);
        report.elapsed = started.elapsed();
        self.metrics
            .sweep_duration
            .observe(report.elapsed.as_secs_f64());
        Ok(report)
    }
}
