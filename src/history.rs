//! Rebuilding the registry from its history: `at TIME`, and the check that
//! the registry agrees with its own events.

use std::collections::BTreeMap;

use crate::model::{Condition, Event, EventKind, Node};

/// Applies events in seq order to rebuild the registry they describe.
#[derive(Debug, Default)]
pub struct Replay {
    nodes: BTreeMap<String, Node>,
}

impl Replay {
    /// Starts from a registry already rebuilt (a checkpoint).
    pub fn from_nodes(nodes: BTreeMap<String, Node>) -> Replay {
        Replay { nodes }
    }

    /// Applies one event. Events about unknown nodes (a lookup failure before
    /// registration, say) change nothing.
    pub fn apply(&mut self, event: &Event) {
        let name = event.node.as_deref().unwrap_or_default();
        match &event.kind {
            EventKind::Registered { node } => {
                let mut node = node.as_ref().clone();
                node.resource_version = event.seq;
                self.nodes.insert(node.name.clone(), node);
            }
            EventKind::Deleted { .. } => {
                self.nodes.remove(name);
            }
            EventKind::ConditionChanged {
                condition,
                to,
                reason,
                message,
                ..
            } => self.change(name, event.seq, |node| {
                let updated = Condition {
                    kind: condition.clone(),
                    status: *to,
                    last_heartbeat: event.time,
                    last_transition: event.time,
                    reason: reason.clone(),
                    message: message.clone(),
                };
                match node.condition_mut(condition) {
                    Some(c) => *c = updated,
                    None => node.conditions.push(updated),
                }
            }),
            EventKind::AddressesChanged { to, .. } => {
                self.change(name, event.seq, |node| node.addresses = to.clone())
            }
            EventKind::TaintsChanged { to, .. } => {
                self.change(name, event.seq, |node| node.taints = to.clone())
            }
            EventKind::OperatorChanged { changes, .. } => self.change(name, event.seq, |node| {
                changes.iter().for_each(|change| change.apply(node))
            }),
            EventKind::AddressLookupFailed { .. }
            | EventKind::RegistrationFailed { .. }
            | EventKind::SourceFailed { .. }
            | EventKind::ControllerStarted { .. }
            | EventKind::ControllerStopped { .. }
            | EventKind::ProbeKeptReady { .. }
            | EventKind::EvictionStarted { .. }
            | EventKind::EvictionDone { .. }
            | EventKind::ObjectChanged { .. }
            | EventKind::KubeletEvent { .. }
            | EventKind::CertificateIssued { .. } => {}
        }
    }

    /// Changes the node `name` as the event at `seq` did, if it is known.
    fn change(&mut self, name: &str, seq: u64, change: impl FnOnce(&mut Node)) {
        if let Some(node) = self.nodes.get_mut(name) {
            change(node);
            node.resource_version = seq;
        }
    }

    /// Adds nodes as they were before the next event (a replay that
    /// follows only some nodes looks them up as they come).
    pub fn extend(&mut self, nodes: impl IntoIterator<Item = Node>) {
        self.nodes
            .extend(nodes.into_iter().map(|n| (n.name.clone(), n)));
    }

    pub fn nodes(&self) -> &BTreeMap<String, Node> {
        &self.nodes
    }

    pub fn into_nodes(self) -> BTreeMap<String, Node> {
        self.nodes
    }
}

/// The registry as the events describe it after applying all of them.
pub fn replay<'a>(events: impl IntoIterator<Item = &'a Event>) -> BTreeMap<String, Node> {
    let mut replay = Replay::default();
    for event in events {
        replay.apply(event);
    }
    replay.into_nodes()
}

/// Differences between stored records and the replayed history. Heartbeat
/// times are not events, so they are not compared.
pub fn compare(stored: &BTreeMap<String, Node>, replayed: &BTreeMap<String, Node>) -> Vec<String> {
    let mut problems = Vec::new();
    for name in stored.keys().filter(|n| !replayed.contains_key(*n)) {
        problems.push(format!(
            "node {name} is registered but its history has no Registered event"
        ));
    }
    for name in replayed.keys().filter(|n| !stored.contains_key(*n)) {
        problems.push(format!(
            "node {name} is registered in its history but missing from the registry"
        ));
    }
    for (name, s) in stored {
        let Some(r) = replayed.get(name) else {
            continue;
        };
        if s.taints != r.taints {
            problems.push(format!(
                "node {name}: taints {:?} disagree with history {:?}",
                s.taints, r.taints
            ));
        }
        if s.addresses != r.addresses {
            problems.push(format!(
                "node {name}: addresses {:?} disagree with history {:?}",
                s.addresses, r.addresses
            ));
        }
        for c in &s.conditions {
            match r.condition(&c.kind) {
                Some(h) if h.status == c.status && h.last_transition == c.last_transition => {}
                Some(h) => problems.push(format!(
                    "node {name}: {} is {} since {} but history says {} since {}",
                    c.kind, c.status, c.last_transition, h.status, h.last_transition
                )),
                None => problems.push(format!("node {name}: condition {} has no history", c.kind)),
            }
        }
    }
    problems
}
