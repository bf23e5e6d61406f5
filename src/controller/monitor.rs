//! Watching pushing nodes for silence: the ancestor's `MonitorNodeStatus`,
//! and the hybrid mode's one probe before a node is declared Unknown.

use super::conditions::{
    after_probe, declare_unknown, monitor, MonitorAction, MESSAGE_STOPPED_POSTING, REASON_UNKNOWN,
};
use super::Controller;
use crate::model::{EventKind, Micros, READY};
use crate::probe::ProbeOutcome;
use crate::store::Batch;

impl Controller {
    /// Checks every node once; runs every `--node-monitor-period`.
    pub(super) async fn monitor_pass(&mut self) {
        let now = self.clock.now();
        let wall = Micros::now();
        let config = &self.config;
        let mut batch = Batch::new(wall);
        let mut rescue = Vec::new();
        for (name, t) in &self.tracked {
            let action = monitor(
                config.status_mode,
                &t.node,
                &t.health,
                now,
                self.started,
                config.node_monitor_grace_period,
                config.node_startup_grace_period,
            );
            match action {
                MonitorAction::Nothing => {}
                MonitorAction::Rescue => rescue.push(name.clone()),
                MonitorAction::Unknown { reason, message } => {
                    let mut node = t.node.clone();
                    let events = declare_unknown(&mut node, reason, &message, wall);
                    if !events.is_empty() {
                        batch.record(node, events);
                    }
                }
            }
        }
        let ages: Vec<f64> = self
            .tracked
            .values()
            .filter(|t| t.health.pushing)
            .map(|t| {
                now.saturating_duration_since(t.health.last_push)
                    .as_secs_f64()
            })
            .collect();
        self.metrics.set_heartbeat_ages(ages);
        for name in rescue {
            let Some(t) = self.tracked.get_mut(&name) else {
                continue;
            };
            t.health.rescuing = true;
            // Rescues are for hybrid mode, which always has a prober.
            let Some(prober) = self.prober.clone() else {
                continue;
            };
            let target = t.target.clone();
            tracing::info!(node = %name, "heartbeats stopped; probing once before declaring the node Unknown");
            self.rescues.spawn(async move {
                let outcome = match target {
                    Some(target) => prober.probe(&target).await,
                    None => ProbeOutcome::NoAnswer {
                        error: crate::probe::ProbeError::NoAddress,
                    },
                };
                (name, outcome)
            });
        }
        if !batch.is_empty() {
            // Each transition is logged where it becomes durable.
            if let Err(e) = self.commit(batch).await {
                super::log_unstored("monitor results", &e);
            }
            self.update_gauges();
        }
    }

    /// The answer to a hybrid rescue probe: healthy keeps the node Ready (and
    /// says why, once); anything else makes it Unknown. Either way the node
    /// is probed from now on, until it pushes again.
    pub(super) async fn after_rescue(&mut self, name: &str, outcome: ProbeOutcome) {
        let now = self.clock.now();
        let wall = Micros::now();
        let grace = self.config.node_monitor_grace_period;
        let Some(t) = self.tracked.get_mut(name) else {
            return;
        };
        t.health.rescuing = false;
        if !t.health.pushing || now.saturating_duration_since(t.health.last_push) < grace {
            // A heartbeat arrived while the probe was out: nothing to decide.
            return;
        }
        t.health.pushing = false;
        let mut node = t.node.clone();
        let mut batch = Batch::new(wall);
        match &outcome {
            ProbeOutcome::Healthy => {
                let current = node.ready();
                t.health.grace_from = now;
                t.health.last_answer = Some(wall);
                let message = format!(
                    "Kubelet stopped posting node status for {} but answers /healthz; probing it instead",
                    crate::duration::format(grace)
                );
                tracing::info!(node = %name, "{message}");
                let mut events = vec![EventKind::ProbeKeptReady { message }];
                if let Some(v) = after_probe(current, &outcome, &mut t.health, now, wall, grace) {
                    events.push(super::conditions::apply(
                        &mut node,
                        READY,
                        v,
                        wall,
                        Some(wall),
                    ));
                }
                batch.record(node, events);
            }
            ProbeOutcome::Unhealthy { .. } | ProbeOutcome::NoAnswer { .. } => {
                let detail = match &outcome {
                    ProbeOutcome::Unhealthy { status, excerpt } => {
                        format!("/healthz returned {status}: {excerpt}")
                    }
                    ProbeOutcome::NoAnswer { error } => format!("/healthz did not answer: {error}"),
                    ProbeOutcome::Healthy => unreachable!("handled above"),
                };
                let message = format!("{MESSAGE_STOPPED_POSTING} {detail}");
                let events = declare_unknown(&mut node, REASON_UNKNOWN, &message, wall);
                if events.is_empty() {
                    return;
                }
                batch.record(node, events);
            }
        }
        if let Err(e) = self.commit(batch).await {
            super::log_unstored("monitor results", &e);
        }
        self.update_gauges();
    }
}
