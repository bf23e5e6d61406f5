//! Deciding a node's Ready condition from probe answers: the ancestor's
//! `DoCheck`, with a grace period measured on the controller's own clock.

use std::time::Duration;

use tokio::time::Instant;

use super::StatusMode;
use crate::model::{Condition, ConditionStatus, EventKind, Micros, Node, READY};
use crate::probe::ProbeOutcome;

/// The conditions a silent node loses along with Ready, as upstream.
pub const MONITORED: [&str; 4] = [READY, "MemoryPressure", "DiskPressure", "PIDPressure"];
pub const MESSAGE_STOPPED_POSTING: &str = "Kubelet stopped posting node status.";
pub const MESSAGE_NEVER_POSTED: &str = "Kubelet never posted node status.";

/// What a monitor pass does for one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MonitorAction {
    Nothing,
    /// Probe once before declaring it Unknown (hybrid).
    Rescue,
    /// Declare Ready and the pressure conditions Unknown.
    Unknown {
        reason: &'static str,
        message: String,
    },
}

/// The ancestor's `MonitorNodeStatus` for one node, on the controller's clock.
pub fn monitor(
    mode: StatusMode,
    node: &Node,
    health: &Health,
    now: Instant,
    started: Instant,
    grace: Duration,
    startup_grace: Duration,
) -> MonitorAction {
    if mode == StatusMode::Probe {
        return MonitorAction::Nothing;
    }
    if health.pushing {
        if now.saturating_duration_since(health.last_push) < grace {
            return MonitorAction::Nothing;
        }
        return match mode {
            StatusMode::Hybrid if health.rescuing => MonitorAction::Nothing,
            StatusMode::Hybrid => MonitorAction::Rescue,
            _ => MonitorAction::Unknown {
                reason: REASON_UNKNOWN,
                message: MESSAGE_STOPPED_POSTING.into(),
            },
        };
    }
    let never_posted = node
        .condition(READY)
        .is_none_or(|c| c.reason == REASON_NEVER_UPDATED);
    if mode == StatusMode::Push
        && never_posted
        && now.saturating_duration_since(started) >= startup_grace
    {
        return MonitorAction::Unknown {
            reason: REASON_NEVER_UPDATED,
            message: MESSAGE_NEVER_POSTED.into(),
        };
    }
    MonitorAction::Nothing
}

/// Sets Ready and the pressure conditions the node has to Unknown, keeping
/// their last heartbeat; returns an event per condition that changed.
pub fn declare_unknown(
    node: &mut Node,
    reason: &str,
    message: &str,
    wall: Micros,
) -> Vec<EventKind> {
    let mut events = Vec::new();
    if node.condition(READY).is_none() {
        node.conditions.push(never_probed(wall));
    }
    for condition in node
        .conditions
        .iter_mut()
        .filter(|c| MONITORED.contains(&c.kind.as_str()))
    {
        if condition.status == ConditionStatus::Unknown {
            continue;
        }
        events.push(EventKind::ConditionChanged {
            condition: condition.kind.clone(),
            from: Some(condition.status),
            to: ConditionStatus::Unknown,
            reason: reason.into(),
            message: message.into(),
        });
        condition.status = ConditionStatus::Unknown;
        condition.reason = reason.into();
        condition.message = message.into();
        condition.last_transition = wall;
    }
    events
}

pub const REASON_READY: &str = "KubeletReady";
pub const REASON_NOT_READY: &str = "KubeletNotReady";
pub const REASON_UNKNOWN: &str = "NodeStatusUnknown";
pub const REASON_NEVER_UPDATED: &str = "NodeStatusNeverUpdated";

/// What the controller knows of a node's health between probes and pushes.
/// In memory only: after a restart every node starts fresh from the
/// controller's start, so the controller's downtime is never the node's.
#[derive(Debug, Clone)]
pub struct Health {
    /// The last healthy answer, or when the controller began watching the
    /// node (registration or controller start) if none was seen since.
    pub grace_from: Instant,
    /// Wall time of the newest answer of any kind (`lastHeartbeatTime`).
    pub last_answer: Option<Micros>,
    /// Whether the node's health comes from its own heartbeats (status
    /// updates, Lease renewals) rather than from probes.
    pub pushing: bool,
    /// When the controller last saw a heartbeat, on its own clock.
    pub last_push: Instant,
    /// A single probe is out to check a silent pushing node (hybrid).
    pub rescuing: bool,
}

impl Health {
    /// A node the controller starts watching at `now`.
    pub fn watching_from(now: Instant) -> Health {
        Health {
            grace_from: now,
            last_answer: None,
            pushing: false,
            last_push: now,
            rescuing: false,
        }
    }

    /// A node read back from the store at start-up. In push mode a node that
    /// posted before is watched for silence from now on; in the other modes
    /// every node is probed until it pushes again.
    pub fn restored(node: &Node, mode: StatusMode, now: Instant) -> Health {
        let posted_before = node
            .condition(READY)
            .is_some_and(|c| c.reason != REASON_NEVER_UPDATED);
        Health {
            pushing: mode == StatusMode::Push && posted_before,
            ..Health::watching_from(now)
        }
    }

    /// Records a heartbeat seen now.
    pub fn heartbeat(&mut self, now: Instant) {
        self.pushing = true;
        self.last_push = now;
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
    set_condition(
        node,
        Condition {
            kind: kind.into(),
            status: verdict.status,
            last_heartbeat: heartbeat.unwrap_or(wall),
            last_transition: wall,
            reason: verdict.reason.into(),
            message: verdict.message,
        },
    )
}

/// Puts `updated` in place of the node's condition of its kind (or adds
/// it) and returns the event that records the change.
pub fn set_condition(node: &mut Node, updated: Condition) -> EventKind {
    let from = node.condition(&updated.kind).map(|c| c.status);
    let event = EventKind::ConditionChanged {
        condition: updated.kind.clone(),
        from,
        to: updated.status,
        reason: updated.reason.clone(),
        message: updated.message.clone(),
    };
    match node.condition_mut(&updated.kind) {
        Some(c) => *c = updated,
        None => node.conditions.push(updated),
    }
    event
}

#[cfg(test)]
mod tests {
    use super::*;
    use ConditionStatus::*;

    const GRACE: Duration = Duration::from_secs(40);

    fn no_answer() -> ProbeOutcome {
        ProbeOutcome::NoAnswer {
            error: crate::probe::ProbeError::Answer(crate::probe::AnswerError::ClosedBeforeAnswer),
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

    fn pushing_node() -> (Node, Health) {
        let node = crate::store::records::tests::sample_node();
        let mut health = Health::watching_from(Instant::now());
        health.heartbeat(Instant::now());
        (node, health)
    }

    fn monitor_at(
        mode: StatusMode,
        node: &Node,
        health: &Health,
        started: Instant,
    ) -> MonitorAction {
        monitor(
            mode,
            node,
            health,
            Instant::now(),
            started,
            GRACE,
            Duration::from_secs(60),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_pushing_node_is_unknown_after_grace_in_push_mode() {
        let started = Instant::now();
        let (node, health) = pushing_node();
        tokio::time::advance(Duration::from_secs(39)).await;
        assert_eq!(
            monitor_at(StatusMode::Push, &node, &health, started),
            MonitorAction::Nothing
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(
            monitor_at(StatusMode::Push, &node, &health, started),
            MonitorAction::Unknown {
                reason: REASON_UNKNOWN,
                message: MESSAGE_STOPPED_POSTING.into()
            }
        );
        // Hybrid probes once first, and only once while that probe is out.
        assert_eq!(
            monitor_at(StatusMode::Hybrid, &node, &health, started),
            MonitorAction::Rescue
        );
        let rescuing = Health {
            rescuing: true,
            ..health.clone()
        };
        assert_eq!(
            monitor_at(StatusMode::Hybrid, &node, &rescuing, started),
            MonitorAction::Nothing
        );
        // Probe mode never monitors.
        assert_eq!(
            monitor_at(StatusMode::Probe, &node, &health, started),
            MonitorAction::Nothing
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_heartbeat_restarts_the_grace_period() {
        let started = Instant::now();
        let (node, mut health) = pushing_node();
        tokio::time::advance(Duration::from_secs(30)).await;
        health.heartbeat(Instant::now());
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(
            monitor_at(StatusMode::Push, &node, &health, started),
            MonitorAction::Nothing
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_that_never_posted_is_unknown_after_the_startup_grace() {
        let started = Instant::now();
        let mut node = crate::store::records::tests::sample_node();
        node.conditions = vec![never_probed(Micros(0))];
        let health = Health::restored(&node, StatusMode::Push, started);
        assert!(!health.pushing);
        tokio::time::advance(Duration::from_secs(59)).await;
        assert_eq!(
            monitor_at(StatusMode::Push, &node, &health, started),
            MonitorAction::Nothing
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(
            monitor_at(StatusMode::Push, &node, &health, started),
            MonitorAction::Unknown {
                reason: REASON_NEVER_UPDATED,
                message: MESSAGE_NEVER_POSTED.into()
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_restart_a_pushing_node_gets_the_whole_grace_from_the_start() {
        // Ready before the controller went down, for however long.
        let node = crate::store::records::tests::sample_node();
        let started = Instant::now();
        let health = Health::restored(&node, StatusMode::Push, started);
        assert!(health.pushing);
        tokio::time::advance(Duration::from_secs(39)).await;
        assert_eq!(
            monitor_at(StatusMode::Push, &node, &health, started),
            MonitorAction::Nothing
        );
        // In hybrid, restored nodes are probed until they push again.
        assert!(!Health::restored(&node, StatusMode::Hybrid, started).pushing);
    }

    #[test]
    fn declaring_unknown_keeps_heartbeats_and_records_each_condition() {
        let mut node = crate::store::records::tests::sample_node();
        node.conditions.push(Condition {
            kind: "MemoryPressure".into(),
            status: False,
            last_heartbeat: Micros(2),
            last_transition: Micros(1),
            reason: "KubeletHasSufficientMemory".into(),
            message: "ok".into(),
        });
        node.conditions.push(Condition {
            kind: "Custom".into(),
            ..node.conditions[1].clone()
        });
        let events = declare_unknown(
            &mut node,
            REASON_UNKNOWN,
            MESSAGE_STOPPED_POSTING,
            Micros(99),
        );
        assert_eq!(
            events.len(),
            2,
            "Ready and MemoryPressure, not Custom: {events:?}"
        );
        for kind in [READY, "MemoryPressure"] {
            let c = node.condition(kind).unwrap();
            assert_eq!(
                (c.status, c.last_transition, c.last_heartbeat),
                (Unknown, Micros(99), Micros(2))
            );
            assert_eq!(c.message, MESSAGE_STOPPED_POSTING);
        }
        assert_eq!(node.condition("Custom").unwrap().status, False);
        assert!(declare_unknown(
            &mut node,
            REASON_UNKNOWN,
            MESSAGE_STOPPED_POSTING,
            Micros(100)
        )
        .is_empty());
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
