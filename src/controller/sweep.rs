//! One probe sweep: the ancestor's `SyncProbedNodeStatus`. The probing runs
//! in a task of its own so pushes are answered while kubelets are slow; the
//! answers come back to the controller, which decides and stores. A probe
//! that fails in any way, a panic included, costs that one answer.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use futures_util::FutureExt;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::conditions::{after_probe, apply};
use super::CommitError;
use super::{Controller, StatusMode};
use crate::metrics::{ProbeLabels, ProbeResult};
use crate::model::{Micros, READY};
use crate::probe::{panic_message, ProbeError, ProbeOutcome, ProbeTarget};

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
        let clock = self.clock.clone();
        tokio::spawn(probe_all(targets, concurrency, clock, move |target| {
            let prober = prober.clone();
            async move { prober.probe(&target).await }
        }))
    }

    /// Decides Ready for each answer and stores the transitions with their
    /// events. Returns after they are durable (and only then publishes
    /// them), so what readers see survives a crash.
    ///
    /// Over 80 lines: deciding, batching, committing and publishing share
    /// the sweep's answers and the nodes sent ahead of the writer.
    pub(super) async fn apply_sweep(
        &mut self,
        answers: Vec<Answer>,
    ) -> Result<SweepReport, CommitError> {
        let now = Micros::now();
        let grace = self.config.node_monitor_grace_period;
        let mode = self.config.status_mode;
        // Transitions, a chunk of nodes to a batch (see [`super::WRITE_CHUNK`]).
        let mut batches = Vec::new();
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
            if mode == StatusMode::Hybrid && tracked.health.pushing {
                // It started pushing while the sweep was out; its heartbeats decide.
                continue;
            }
            // Failures are logged as they start, long before the grace
            // period ends; transitions are logged where they become durable.
            let address = tracked.target.as_ref().map(|t| t.addr);
            match &answer.outcome {
                ProbeOutcome::Healthy => {
                    self.probe_failures
                        .answered(&answer.name, address, answer.at);
                }
                ProbeOutcome::Unhealthy { status, excerpt } => {
                    let reason = format!("/healthz returned {status}: {excerpt}");
                    self.probe_failures
                        .failed(&answer.name, address, &reason, answer.at);
                }
                ProbeOutcome::NoAnswer { error } => {
                    self.probe_failures.failed(
                        &answer.name,
                        address,
                        &error.to_string(),
                        answer.at,
                    );
                }
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
            let event = apply(&mut node, READY, verdict, now, tracked.health.last_answer);
            super::record_chunked(&mut batches, now, node, [event]);
        }
        self.probe_failures
            .retain(|name| self.tracked.contains_key(name));
        // A refused commit leaves the decisions to the next sweep; the rest
        // of what a sweep tells (answer times, metrics) holds either way.
        let mut stored = Ok(());
        for batch in batches.into_iter().filter(|b| !b.is_empty()) {
            match self.commit(batch).await {
                Ok(written) => report.transitions += written.nodes.len(),
                // The rest would be refused too; the next sweep decides again.
                Err(e) => {
                    stored = Err(e);
                    break;
                }
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

/// Probes every target with `probe`, a bounded number at a time; answers
/// sorted by name, each timed on the controller's `clock`. A probe that
/// panics is that node's failed probe, with the panic as its reason; the
/// others go on.
async fn probe_all<P, F>(
    targets: Vec<(String, Option<Arc<ProbeTarget>>)>,
    concurrency: usize,
    clock: super::Clock,
    probe: P,
) -> Vec<Answer>
where
    P: Fn(Arc<ProbeTarget>) -> F,
    F: Future<Output = ProbeOutcome>,
{
    let sweep_started = Instant::now();
    let (probe, clock) = (&probe, &clock);
    let mut answers: Vec<Answer> = stream::iter(targets)
        .map(|(name, target)| async move {
            let begun = Instant::now();
            let outcome = match target {
                Some(target) => AssertUnwindSafe(async { probe(target).await })
                    .catch_unwind()
                    .await
                    .unwrap_or_else(|panic| {
                        let error = ProbeError::Panicked(panic_message(panic.as_ref()).into());
                        tracing::warn!(node = %name, "{error}");
                        ProbeOutcome::NoAnswer { error }
                    }),
                None => ProbeOutcome::NoAnswer {
                    error: ProbeError::NoAddress,
                },
            };
            Answer {
                name,
                outcome,
                latency: begun.elapsed(),
                wall: Micros::now(),
                at: clock.now(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn target(i: u8) -> Option<Arc<ProbeTarget>> {
        let addr: SocketAddr = ([127, 0, 0, i], 10250).into();
        Some(Arc::new(ProbeTarget::new(addr)))
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_probe_costs_its_own_answer_only() {
        let targets = vec![
            ("a".to_string(), target(1)),
            ("b".to_string(), target(2)),
            ("c".to_string(), target(3)),
            ("d".to_string(), None),
        ];
        let answers = probe_all(
            targets,
            2,
            crate::controller::Clock::new(),
            |t: Arc<ProbeTarget>| async move {
                if t.addr.ip() == std::net::Ipv4Addr::new(127, 0, 0, 2) {
                    // What a chunk size near 2^64 once did to the reader.
                    panic!("attempt to add with overflow");
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                ProbeOutcome::Healthy
            },
        )
        .await;
        let outcomes: Vec<(&str, &ProbeOutcome)> = answers
            .iter()
            .map(|a| (a.name.as_str(), &a.outcome))
            .collect();
        assert_eq!(outcomes.len(), 4);
        assert_eq!(outcomes[0], ("a", &ProbeOutcome::Healthy));
        assert_eq!(outcomes[2], ("c", &ProbeOutcome::Healthy));
        match outcomes[1] {
            ("b", ProbeOutcome::NoAnswer { error }) => {
                let error = error.to_string();
                assert!(error.starts_with("the probe panicked: "), "{error}");
                assert!(error.contains("attempt to add with overflow"), "{error}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(outcomes[3], ("d", ProbeOutcome::NoAnswer { .. })));
    }
}
