//! Deciding a node's Ready condition from probe answers: the ancestor's
//! `DoCheck`, with a grace period measured on the controller's own clock.

use std::time::Duration;

use tokio::time::Instant;

use crate::model::{Condition, ConditionStatus, EventKind, Micros, Node, READY};
use crate::probe::ProbeOutcome;

pub const REASON_READY: &str = "KubeletReady";
pub const REASON_NOT_READY: &str = "KubeletNotReady";
pub const REASON_UNKNOWN: &str = "NodeStatusUnknown";
pub const REASON_NEVER_UPDATED: &str = "NodeStatusNeverUpdated";

/// What the controller knows of a node's health between probes. In memory
/// only: after a restart every node starts fresh from the controller's start.
#[derive(Debug, Clone)]
pub struct Health {
    /// The last healthy answer, or when the controller began watching the
    /// node (registration or controller start) if none was seen since.
    pub grace_from: Instant,
    /// Wall time of the newest answer of any kind (`lastHeartbeatTime`).
    pub last_answer: Option<Micros>,
}

impl Health {
    /// A node the controller starts watching at `now`.
    pub fn watching_from(now: Instant) -> Health {
        Health {
            grace_from: now,
            last_answer: None,
        }
    }

    /// Whether the grace period has run out without a healthy answer.
    pub fn grace_expired(&self, now: Instant, grace: Duration) -> bool {
        now.saturating_duration_since(self.grace_from) >= grace
    }
}

/// A decided Ready status, with why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub status: ConditionStatus,
    pub reason: &'static str,
    pub message: String,
}

/// Folds one probe answer into `health` and returns the verdict if the Ready
/// status must change.
pub fn after_probe(
    current: ConditionStatus,
    outcome: &ProbeOutcome,
    health: &mut Health,
    now: Instant,
    wall: Micros,
    grace: Duration,
) -> Option<Verdict> {
    let verdict = match outcome {
        ProbeOutcome::Healthy => {
            health.grace_from = now;
            health.last_answer = Some(wall);
            Verdict {
                status: ConditionStatus::True,
                reason: REASON_READY,
                message: "kubelet /healthz endpoint returns ok".into(),
            }
        }
        ProbeOutcome::Unhealthy { status, excerpt } => {
            health.last_answer = Some(wall);
            Verdict {
                status: ConditionStatus::False,
                reason: REASON_NOT_READY,
                message: if excerpt.is_empty() {
                    format!("kubelet /healthz returned {status}")
                } else {
                    format!("kubelet /healthz returned {status}: {excerpt}")
                },
            }
        }
        ProbeOutcome::NoAnswer { error } => {
            if !health.grace_expired(now, grace) {
                return None;
            }
            Verdict {
                status: ConditionStatus::Unknown,
                reason: REASON_UNKNOWN,
                message: format!(
                    "Kubelet has not answered /healthz healthily for {}: {error}",
                    crate::duration::format(grace)
                ),
            }
        }
    };
    (verdict.status != current).then_some(verdict)
}

/// The Ready condition of a node that was just registered and never probed.
pub fn never_probed(wall: Micros) -> Condition {
    Condition {
        kind: READY.into(),
        status: ConditionStatus::Unknown,
        last_heartbeat: wall,
        last_transition: wall,
        reason: REASON_NEVER_UPDATED.into(),
        message: "Kubelet has not been probed yet.".into(),
    }
}

/// Writes a verdict into the node's condition and returns the event that
/// records it. `lastTransitionTime` moves because the status does.
pub fn apply(
    node: &mut Node,
    kind: &str,
    verdict: Verdict,
    wall: Micros,
    heartbeat: Option<Micros>,
) -> EventKind {
    let from = node.condition(kind).map(|c| c.status);
    let updated = Condition {
        kind: kind.into(),
        status: verdict.status,
        last_heartbeat: heartbeat.unwrap_or(wall),
        last_transition: wall,
        reason: verdict.reason.into(),
        message: verdict.message.clone(),
    };
    match node.condition_mut(kind) {
        Some(c) => *c = updated,
        None => node.conditions.push(updated),
    }
    EventKind::ConditionChanged {
        condition: kind.into(),
        from,
        to: verdict.status,
        reason: verdict.reason.into(),
        message: verdict.message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ConditionStatus::*;

    const GRACE: Duration = Duration::from_secs(40);

    fn no_answer() -> ProbeOutcome {
        ProbeOutcome::NoAnswer {
            error: "connection refused".into(),
        }
    }

    fn sick() -> ProbeOutcome {
        ProbeOutcome::Unhealthy {
            status: 500,
            excerpt: "[-]syncloop failed".into(),
        }
    }

    /// Feeds answers every `period`, returning the statuses after each.
    async fn run(
        start: ConditionStatus,
        answers: &[ProbeOutcome],
        period: Duration,
    ) -> Vec<ConditionStatus> {
        let mut health = Health::watching_from(Instant::now());
        let mut status = start;
        let mut seen = Vec::new();
        for answer in answers {
            tokio::time::advance(period).await;
            if let Some(v) = after_probe(
                status,
                answer,
                &mut health,
                Instant::now(),
                Micros(0),
                GRACE,
            ) {
                status = v.status;
            }
            seen.push(status);
        }
        seen
    }

    #[tokio::test(start_paused = true)]
    async fn healthy_answer_is_ready_at_once() {
        assert_eq!(
            run(Unknown, &[ProbeOutcome::Healthy], Duration::from_secs(10)).await,
            [True]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_unhealthy_answer_is_not_ready_at_once() {
        assert_eq!(run(True, &[sick()], Duration::from_secs(10)).await, [False]);
    }

    #[tokio::test(start_paused = true)]
    async fn silence_is_unknown_only_after_the_grace_period() {
        let answers = [
            ProbeOutcome::Healthy,
            no_answer(),
            no_answer(),
            no_answer(),
            no_answer(),
            no_answer(),
        ];
        // Healthy at 10s; silent from 20s; grace from the healthy answer ends at 50s.
        assert_eq!(
            run(Unknown, &answers, Duration::from_secs(10)).await,
            [True, True, True, True, Unknown, Unknown]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn one_healthy_answer_restarts_the_grace_period() {
        let answers = [
            no_answer(),
            no_answer(),
            no_answer(),
            ProbeOutcome::Healthy,
            no_answer(),
            no_answer(),
            no_answer(),
        ];
        let seen = run(True, &answers, Duration::from_secs(10)).await;
        assert_eq!(seen, [True, True, True, True, True, True, True]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_sick_node_that_goes_silent_becomes_unknown_after_grace() {
        // Sick answers are answers but not healthy: grace runs from the controller start.
        let answers = [sick(), no_answer(), no_answer(), no_answer(), no_answer()];
        assert_eq!(
            run(True, &answers, Duration::from_secs(10)).await,
            [False, False, False, Unknown, Unknown]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_restart_the_full_grace_runs_from_the_controller_start() {
        // A node recorded Ready before the controller stopped stays Ready
        // through silence shorter than the grace period, however long the
        // controller itself was down: its downtime is not the node's.
        let answers = [no_answer(), no_answer(), no_answer()];
        assert_eq!(
            run(True, &answers, Duration::from_secs(13)).await,
            [True, True, True]
        );
        let answers = [no_answer(), no_answer(), no_answer(), no_answer()];
        assert_eq!(
            run(True, &answers, Duration::from_secs(10)).await,
            [True, True, True, Unknown]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_change_means_no_verdict_and_no_transition() {
        let mut health = Health::watching_from(Instant::now());
        let v = after_probe(
            True,
            &ProbeOutcome::Healthy,
            &mut health,
            Instant::now(),
            Micros(5),
            GRACE,
        );
        assert_eq!(v, None);
        assert_eq!(
            health.last_answer,
            Some(Micros(5)),
            "the heartbeat still moves"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn apply_moves_transition_time_only_with_the_status() {
        let mut node = crate::store::records::tests::sample_node();
        let event = apply(
            &mut node,
            READY,
            Verdict {
                status: Unknown,
                reason: REASON_UNKNOWN,
                message: "m".into(),
            },
            Micros(77),
            Some(Micros(60)),
        );
        let c = node.condition(READY).unwrap();
        assert_eq!(
            (c.status, c.last_transition, c.last_heartbeat),
            (Unknown, Micros(77), Micros(60))
        );
        assert_eq!(
            event,
            EventKind::ConditionChanged {
                condition: READY.into(),
                from: Some(True),
                to: Unknown,
                reason: REASON_UNKNOWN.into(),
                message: "m".into()
            }
        );
    }

    #[test]
    fn messages_carry_the_status_and_excerpt() {
        let mut health = Health::watching_from(Instant::now());
        let v = after_probe(True, &sick(), &mut health, Instant::now(), Micros(0), GRACE).unwrap();
        assert_eq!(v.reason, REASON_NOT_READY);
        assert_eq!(
            v.message,
            "kubelet /healthz returned 500: [-]syncloop failed"
        );
    }
}
