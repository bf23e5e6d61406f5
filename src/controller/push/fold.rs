//! Folding a pushed node status into a node, decided without doing: a pure
//! function of (node, pushed status, now) that says what the push comes to.
//! The controller's shell in `push.rs` applies the answer and commits it.

use crate::controller::conditions::{set_condition, REASON_NEVER_UPDATED};
use crate::controller::eviction::wanted_taints;
use crate::controller::StatusMode;
use crate::model::{
    Address, Condition, EventKind, EvictionMode, Micros, Node, PushedStatus, READY,
};
use crate::validation::Invalid;

/// What the controller's rules make of a push, beyond the node itself.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct FoldRules {
    pub mode: StatusMode,
    /// Taints follow Ready in the same write, as the eviction pass would
    /// make them follow (whether the node is evicted, and the eviction
    /// mode); `None` when eviction is off.
    pub taints: Option<(bool, EvictionMode)>,
}

/// What a pushed status comes to.
#[derive(Debug, PartialEq)]
pub(crate) struct Folded {
    pub fold: Fold,
    /// The kubelet's own Ready heartbeat time moved: the node is alive.
    pub ready_beat: bool,
    /// Pushed addresses that were not taken, and why.
    pub addresses_ignored: Option<String>,
}

#[derive(Debug, PartialEq)]
pub(crate) enum Fold {
    /// Heartbeat times only, the common case: the new `lastHeartbeatTime`
    /// of each condition, by its index in the node's conditions.
    Beats(Vec<(usize, Micros)>),
    /// Nothing to write but times, though more than times was pushed
    /// (addresses that were not taken, say): the node as it now reads.
    Quiet(Node),
    /// A change to write: the node as it should be stored, and its events.
    Write {
        node: Node,
        events: Vec<EventKind>,
        /// Its addresses changed, so the probe target moves.
        addresses_moved: bool,
    },
}

/// Folds `pushed` into `node` at wall time `wall`. `owner_of` names the
/// other node that already has an address, if one does. A push that adds
/// too many condition types, or that would take the node past
/// [`crate::validation::MAX_NODE_BYTES`], is refused.
///
/// Over 80 lines: one pass over the pushed parts (conditions, addresses,
/// info, capacity), each deciding against the node as the earlier parts
/// left it, and the write-or-heartbeat verdict over all of them.
pub(crate) fn fold_status(
    node: &Node,
    pushed: PushedStatus,
    rules: &FoldRules,
    wall: Micros,
    owner_of: impl Fn(&str) -> Option<String>,
) -> Result<Folded, Invalid> {
    crate::validation::extra_conditions(
        node.conditions.iter().map(|c| c.kind.as_str()),
        pushed.conditions.iter().map(|c| c.kind.as_str()),
    )
    .map_err(|e| Invalid::node(&node.name, e))?;
    let ready_beat = ready_beat(node, &pushed, rules.mode, wall);
    if heartbeat_only(node, &pushed, rules.mode) {
        let beats = pushed
            .conditions
            .iter()
            .filter_map(|pc| heartbeat_time(node, pc, rules.mode, wall))
            .collect();
        return Ok(Folded {
            fold: Fold::Beats(beats),
            ready_beat,
            addresses_ignored: None,
        });
    }
    let mut next = node.clone();
    let mut events = Vec::new();
    for pc in pushed
        .conditions
        .into_iter()
        .filter(|pc| folded(&pc.kind, rules.mode))
    {
        let beat = pc.last_heartbeat.unwrap_or(wall);
        match next.condition_mut(&pc.kind) {
            Some(c) if c.status == pc.status => {
                c.last_heartbeat = beat;
                c.reason = pc.reason;
                c.message = pc.message;
            }
            _ => events.push(set_condition(
                &mut next,
                Condition {
                    kind: pc.kind,
                    status: pc.status,
                    last_heartbeat: beat,
                    last_transition: wall,
                    reason: pc.reason,
                    message: pc.message,
                },
            )),
        }
    }
    let mut addresses_ignored = None;
    let mut addresses_moved = false;
    if let Some(addresses) = pushed.addresses {
        match addresses_to_take(&next, addresses, owner_of) {
            AddressDecision::Keep => {}
            AddressDecision::Ignore(why) => addresses_ignored = Some(why),
            AddressDecision::Take(addresses) => {
                events.push(EventKind::AddressesChanged {
                    from: std::mem::take(&mut next.addresses),
                    to: addresses.clone(),
                });
                next.addresses = addresses;
                addresses_moved = true;
            }
        }
    }
    if let Some(info) = pushed.node_info {
        next.node_info = info;
    }
    if let Some(capacity) = pushed.capacity {
        next.capacity = capacity;
    }
    // Images, the kubelet's port, runtime handlers, features and volumes
    // are kept as reported and written with the node, but make no entry
    // in its history: they are an inventory the kubelet refreshes (images
    // come and go with every pull and garbage collection), not a
    // transition anyone decides on, as `nodeInfo` and capacity are not
    // either. The history keeps what changes the node's health and its
    // place in the cluster; `kubectl get node -o yaml` shows the rest.
    if let Some(reported) = pushed.reported {
        next.reported = reported;
    }
    if events.is_empty() && same_but_heartbeats(node, &next) {
        return Ok(Folded {
            fold: Fold::Quiet(next),
            ready_beat,
            addresses_ignored,
        });
    }
    // Taints follow Ready in this same write, so a status change is one
    // write and one flush, not a second write at the next eviction pass.
    if let Some((evicted, mode)) = rules.taints {
        let taints = wanted_taints(&next, evicted, mode, wall);
        if taints != next.taints {
            events.push(EventKind::TaintsChanged {
                from: std::mem::replace(&mut next.taints, taints.clone()),
                to: taints,
            });
        }
    }
    // Checked only for a write: heartbeats change no size.
    crate::validation::node_size(&next, Some(node)).map_err(|e| Invalid::node(&node.name, e))?;
    Ok(Folded {
        fold: Fold::Write {
            node: next,
            events,
            addresses_moved,
        },
        ready_beat,
        addresses_ignored,
    })
}

/// Whether the pushed condition `kind` is folded into the node: in probe
/// mode the kubelet's word on Ready is not what decides it.
fn folded(kind: &str, mode: StatusMode) -> bool {
    !(kind == READY && mode == StatusMode::Probe)
}

/// Whether `pushed` is a Ready heartbeat: a change of the kubelet's own
/// timestamp (stamped on our clock and never compared with it), or the
/// first word of a node that never posted.
pub(crate) fn ready_beat(
    node: &Node,
    pushed: &PushedStatus,
    mode: StatusMode,
    wall: Micros,
) -> bool {
    pushed.conditions.iter().any(|pc| {
        pc.kind == READY
            && folded(&pc.kind, mode)
            && node.condition(READY).is_none_or(|c| {
                c.last_heartbeat != pc.last_heartbeat.unwrap_or(wall)
                    || c.reason == REASON_NEVER_UPDATED
            })
    })
}

/// Where a pushed condition's heartbeat goes: the index of the node's
/// condition of its type, and the time; `None` if it is not folded.
fn heartbeat_time(
    node: &Node,
    pc: &crate::model::PushedCondition,
    mode: StatusMode,
    wall: Micros,
) -> Option<(usize, Micros)> {
    if !folded(&pc.kind, mode) {
        return None;
    }
    let index = node.conditions.iter().position(|c| c.kind == pc.kind)?;
    Some((index, pc.last_heartbeat.unwrap_or(wall)))
}

/// Folds a push for which [`heartbeat_only`] holds into `node` in place:
/// what [`Fold::Beats`] says, without a list of it. Whether any time
/// moved: a push that repeats the node as it is changes nothing, so
/// nothing is left to checkpoint.
pub(crate) fn set_heartbeat_times(
    node: &mut Node,
    pushed: &PushedStatus,
    mode: StatusMode,
    wall: Micros,
) -> bool {
    let mut moved = false;
    for pc in &pushed.conditions {
        if let Some((index, beat)) = heartbeat_time(node, pc, mode, wall) {
            let held = &mut node.conditions[index].last_heartbeat;
            moved |= *held != beat;
            *held = beat;
        }
    }
    moved
}

/// Whether folding `pushed` into `node` changes heartbeat times at most:
/// every condition it reports is there with the same status, reason and
/// message, and what else it reports is what the node has. Exactly the
/// pushes after which [`same_but_heartbeats`] holds and no event is due.
pub(crate) fn heartbeat_only(node: &Node, pushed: &PushedStatus, mode: StatusMode) -> bool {
    pushed.conditions.iter().all(|pc| {
        (pc.kind == READY && mode == StatusMode::Probe)
            || node.condition(&pc.kind).is_some_and(|c| {
                c.status == pc.status && c.reason == pc.reason && c.message == pc.message
            })
    }) && pushed
        .addresses
        .as_ref()
        .is_none_or(|a| a.is_empty() || *a == node.addresses)
        && pushed
            .node_info
            .as_ref()
            .is_none_or(|i| *i == node.node_info)
        && pushed.capacity.as_ref().is_none_or(|c| *c == node.capacity)
        && pushed.reported.as_ref().is_none_or(|r| *r == node.reported)
}

/// Whether two records of a node differ in heartbeat times at most.
pub(crate) fn same_but_heartbeats(a: &Node, b: &Node) -> bool {
    // Every field, so a new one is not forgotten here.
    let Node {
        name,
        uid,
        created,
        resource_version,
        source,
        labels,
        annotations,
        external_id,
        provider_id,
        capacity,
        unschedulable,
        taints,
        addresses,
        conditions,
        node_info,
        reported,
    } = a;
    *name == b.name
        && *uid == b.uid
        && *created == b.created
        && *resource_version == b.resource_version
        && *source == b.source
        && *labels == b.labels
        && *annotations == b.annotations
        && *external_id == b.external_id
        && *provider_id == b.provider_id
        && *capacity == b.capacity
        && *unschedulable == b.unschedulable
        && *taints == b.taints
        && *addresses == b.addresses
        && *node_info == b.node_info
        && *reported == b.reported
        && conditions.len() == b.conditions.len()
        && conditions.iter().zip(&b.conditions).all(|(x, y)| {
            x.kind == y.kind
                && x.status == y.status
                && x.last_transition == y.last_transition
                && x.reason == y.reason
                && x.message == y.message
        })
}

/// What a node takes of the addresses it pushed.
#[derive(Debug, PartialEq)]
pub(crate) enum AddressDecision {
    /// The same as it has (or nothing usable): nothing to do.
    Keep,
    /// Ignored, and why (the source's addresses win, or another node's are claimed).
    Ignore(String),
    Take(Vec<Address>),
}

/// The rule for pushed addresses: an address the node's source gave (the
/// static list, an inventory or cloud, or a lookup of its name) wins over a
/// pushed one, so a node's token cannot move its node onto another
/// kubelet. A node that registered itself, or whose source gave no address,
/// takes what it pushes, unless that claims an address another node has.
pub(crate) fn addresses_to_take(
    node: &Node,
    pushed: Vec<Address>,
    owner_of: impl Fn(&str) -> Option<String>,
) -> AddressDecision {
    if pushed.is_empty() || pushed == node.addresses {
        return AddressDecision::Keep;
    }
    let self_registered = node.source == crate::model::SELF_REGISTERED;
    if !self_registered && !node.addresses.is_empty() {
        return AddressDecision::Ignore(format!(
            "the node's addresses come from its source ({})",
            node.source
        ));
    }
    for a in &pushed {
        if let Some(other) = owner_of(&a.address) {
            return AddressDecision::Ignore(format!(
                "{} {} is the address of node {other:?}",
                a.kind.as_str(),
                a.address
            ));
        }
    }
    AddressDecision::Take(pushed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::conditions::never_probed;
    use crate::model::{ConditionStatus, PushedCondition};

    /// What a fold writes: the node, its events, whether its addresses moved.
    fn write_of(fold: Fold) -> (Node, Vec<EventKind>, bool) {
        match fold {
            Fold::Write {
                node,
                events,
                addresses_moved,
            } => (node, events, addresses_moved),
            other => panic!("a write was expected: {other:?}"),
        }
    }

    #[test]
    fn only_heartbeat_times_make_a_heartbeat() {
        let now = Micros(1_000_000);
        let mut a = crate::controller::register::new_node(
            &crate::source::static_list::static_spec(
                "edge-1".into(),
                None,
                Default::default(),
                Default::default(),
            ),
            now,
        );
        a.conditions = vec![never_probed(now)];
        let mut b = a.clone();
        b.conditions[0].last_heartbeat = Micros(2_000_000);
        assert!(same_but_heartbeats(&a, &b));
        b.conditions[0].message = "changed".into();
        assert!(!same_but_heartbeats(&a, &b));
        let mut c = a.clone();
        c.node_info.kubelet_version = "v1.33.0".into();
        assert!(!same_but_heartbeats(&a, &c));
        let mut d = a.clone();
        d.conditions.push(never_probed(now));
        assert!(!same_but_heartbeats(&a, &d));
    }

    #[test]
    fn a_heartbeat_only_push_changes_times_and_nothing_else() {
        let now = Micros(1_000_000);
        let mut node = crate::controller::register::new_node(
            &crate::source::static_list::static_spec(
                "edge-1".into(),
                None,
                Default::default(),
                Default::default(),
            ),
            now,
        );
        node.conditions = vec![never_probed(now)];
        node.conditions[0].status = ConditionStatus::True;
        node.conditions[0].reason = "KubeletReady".into();
        node.conditions[0].message = String::new();
        let ready = |status, reason: &str| PushedCondition {
            kind: READY.into(),
            status,
            last_heartbeat: Some(Micros(2_000_000)),
            reason: reason.into(),
            message: String::new(),
        };
        let push = |conditions| PushedStatus {
            conditions,
            ..PushedStatus::default()
        };
        let push_mode = StatusMode::Push;
        let beat = push(vec![ready(ConditionStatus::True, "KubeletReady")]);
        assert!(heartbeat_only(&node, &beat, push_mode));
        let with_info = PushedStatus {
            node_info: Some(node.node_info.clone()),
            addresses: Some(node.addresses.clone()),
            capacity: Some(node.capacity),
            ..beat.clone()
        };
        assert!(heartbeat_only(&node, &with_info, push_mode));
        // A transition, a new reason, a new condition or new node info is a change.
        let down = push(vec![ready(ConditionStatus::False, "KubeletReady")]);
        assert!(!heartbeat_only(&node, &down, push_mode));
        let reason = push(vec![ready(ConditionStatus::True, "Other")]);
        assert!(!heartbeat_only(&node, &reason, push_mode));
        let mut pressure = ready(ConditionStatus::False, "KubeletHasSufficientMemory");
        pressure.kind = "MemoryPressure".into();
        assert!(!heartbeat_only(&node, &push(vec![pressure]), push_mode));
        let mut info = node.node_info.clone();
        info.kubelet_version = "v1.33.0".into();
        let new_info = PushedStatus {
            node_info: Some(info),
            ..beat.clone()
        };
        assert!(!heartbeat_only(&node, &new_info, push_mode));
        // In probe mode the kubelet's Ready is not folded in at all.
        assert!(heartbeat_only(&node, &down, StatusMode::Probe));
    }

    use crate::model::AddressKind;

    fn ip(address: &str) -> Address {
        Address {
            kind: AddressKind::InternalIP,
            address: address.into(),
        }
    }

    #[test]
    fn the_source_address_wins_over_a_pushed_one() {
        let mut node = crate::store::records::tests::sample_node();
        node.addresses = vec![ip("127.0.0.1")];
        let nobody = |_: &str| None;
        assert!(matches!(
            addresses_to_take(&node, vec![ip("127.0.0.2")], nobody),
            AddressDecision::Ignore(why) if why.contains("static")
        ));
        assert_eq!(
            addresses_to_take(&node, node.addresses.clone(), nobody),
            AddressDecision::Keep
        );
        assert_eq!(
            addresses_to_take(&node, vec![], nobody),
            AddressDecision::Keep
        );
        // A static host name that never resolved takes what its kubelet says.
        node.addresses.clear();
        assert_eq!(
            addresses_to_take(&node, vec![ip("127.0.0.2")], nobody),
            AddressDecision::Take(vec![ip("127.0.0.2")])
        );
    }

    #[test]
    fn a_self_registered_node_moves_but_never_onto_another_node() {
        let mut node = crate::store::records::tests::sample_node();
        node.source = crate::model::SELF_REGISTERED.into();
        node.addresses = vec![ip("127.0.0.1")];
        assert_eq!(
            addresses_to_take(&node, vec![ip("127.0.0.3")], |_| None),
            AddressDecision::Take(vec![ip("127.0.0.3")])
        );
        let b_has = |a: &str| (a == "127.0.0.2").then(|| "b".to_string());
        assert!(matches!(
            addresses_to_take(&node, vec![ip("127.0.0.2")], b_has),
            AddressDecision::Ignore(why) if why.contains("\"b\"")
        ));
    }

    const WALL: Micros = Micros(9_000_000);

    fn ready_node() -> Node {
        let mut node = crate::store::records::tests::sample_node();
        node.taints.clear();
        node.conditions[0].reason = "KubeletReady".into();
        node.conditions[0].message = String::new();
        node
    }

    fn pushed(kind: &str, status: ConditionStatus, reason: &str, beat: i64) -> PushedStatus {
        PushedStatus {
            conditions: vec![PushedCondition {
                kind: kind.into(),
                status,
                last_heartbeat: Some(Micros(beat)),
                reason: reason.into(),
                message: String::new(),
            }],
            ..PushedStatus::default()
        }
    }

    const PUSH: FoldRules = FoldRules {
        mode: StatusMode::Push,
        taints: Some((false, EvictionMode::Taint)),
    };

    fn fold(node: &Node, push: PushedStatus, rules: &FoldRules) -> Folded {
        fold_status(node, push, rules, WALL, |_| None).expect("valid")
    }

    #[test]
    fn a_heartbeat_moves_times_only() {
        let node = ready_node();
        let folded = fold(
            &node,
            pushed(READY, ConditionStatus::True, "KubeletReady", 7),
            &PUSH,
        );
        assert_eq!(folded.fold, Fold::Beats(vec![(0, Micros(7))]));
        assert!(folded.ready_beat);
        // The same timestamp again is no sign of life.
        let again = fold(
            &node,
            pushed(READY, ConditionStatus::True, "KubeletReady", 2),
            &PUSH,
        );
        assert_eq!(again.fold, Fold::Beats(vec![(0, Micros(2))]));
        assert!(!again.ready_beat);
        // Without a time of its own, the push is stamped now.
        let mut untimed = pushed(READY, ConditionStatus::True, "KubeletReady", 0);
        untimed.conditions[0].last_heartbeat = None;
        assert_eq!(
            fold(&node, untimed, &PUSH).fold,
            Fold::Beats(vec![(0, WALL)])
        );
    }

    #[test]
    fn a_push_that_takes_a_node_past_its_bound_is_refused() {
        let mut node = ready_node();
        node.labels = (0..19_000)
            .map(|i| (format!("example.com/k-{i:08}"), "v".repeat(20)))
            .collect();
        let size = crate::validation::node_bytes(&node);
        assert!(size < crate::validation::MAX_NODE_BYTES, "{size}");
        // A transition whose message takes the node past the bound.
        let mut push = pushed(READY, ConditionStatus::False, "KubeletNotReady", 7);
        push.conditions[0].message = "m".repeat(crate::validation::MAX_NODE_BYTES - size);
        let e = fold_status(&node, push, &PUSH, WALL, |_| None).unwrap_err();
        assert_eq!(e.causes[0].reason, "FieldValueTooLong");
        // Within it, the same transition is written.
        let mut push = pushed(READY, ConditionStatus::False, "KubeletNotReady", 7);
        push.conditions[0].message = "m".repeat(1000);
        let folded = fold_status(&node, push, &PUSH, WALL, |_| None).unwrap();
        assert!(matches!(folded.fold, Fold::Write { .. }));
    }

    #[test]
    fn a_transition_is_one_write_with_its_taints() {
        let node = ready_node();
        let folded = fold(
            &node,
            pushed(READY, ConditionStatus::False, "KubeletNotReady", 7),
            &PUSH,
        );
        assert!(folded.ready_beat);
        let (written, events, addresses_moved) = write_of(folded.fold);
        assert!(!addresses_moved);
        let ready = written.condition(READY).expect("kept");
        assert_eq!(ready.status, ConditionStatus::False);
        assert_eq!(ready.last_transition, WALL);
        assert_eq!(ready.last_heartbeat, Micros(7));
        assert_eq!(ready.reason, "KubeletNotReady");
        // The taint that follows Ready goes in the same write, not a second one.
        assert_eq!(written.taints.len(), 1);
        assert_eq!(
            written.taints[0].key,
            crate::controller::eviction::TAINT_NOT_READY
        );
        assert_eq!(written.taints[0].added, Some(WALL));
        assert!(matches!(
            &events[..],
            [
                EventKind::ConditionChanged { from: Some(ConditionStatus::True), to: ConditionStatus::False, .. },
                EventKind::TaintsChanged { from, to },
            ] if from.is_empty() && to == &written.taints
        ));
        // Back to Ready lifts it, again in the one write.
        let back = fold(
            &written,
            pushed(READY, ConditionStatus::True, "KubeletReady", 8),
            &PUSH,
        );
        let (lifted, events, _) = write_of(back.fold);
        assert!(lifted.taints.is_empty());
        assert_eq!(events.len(), 2);
        // With eviction off, taints are left alone.
        let off = FoldRules {
            taints: None,
            ..PUSH
        };
        let (untainted, events, _) = write_of(
            fold(
                &node,
                pushed(READY, ConditionStatus::False, "KubeletNotReady", 7),
                &off,
            )
            .fold,
        );
        assert!(untainted.taints.is_empty());
        assert_eq!(events.len(), 1);
    }

    #[test]
    fn a_new_reason_is_written_without_a_transition() {
        let node = ready_node();
        let (written, events, _) = write_of(
            fold(
                &node,
                pushed(READY, ConditionStatus::True, "Other", 7),
                &PUSH,
            )
            .fold,
        );
        assert!(events.is_empty());
        let ready = written.condition(READY).expect("kept");
        assert_eq!(ready.reason, "Other");
        assert_eq!(ready.last_transition, node.conditions[0].last_transition);
    }

    /// The kubelet's images (and the rest it reports) are written with the
    /// node but make no history entry; the same report again is a heartbeat.
    #[test]
    fn a_new_image_list_is_written_without_an_event_and_the_same_is_a_heartbeat() {
        let node = ready_node();
        let mut push = pushed(READY, ConditionStatus::True, "KubeletReady", 7);
        push.reported = Some(crate::model::Reported::sample());
        let (written, events, _) = write_of(fold(&node, push.clone(), &PUSH).fold);
        assert!(events.is_empty(), "{events:?}");
        assert_eq!(written.reported, crate::model::Reported::sample());
        assert_eq!(written.conditions, {
            let mut c = node.conditions.clone();
            c[0].last_heartbeat = Micros(7);
            c
        });

        // Reported again unchanged: times only.
        assert!(heartbeat_only(&written, &push, StatusMode::Push));
        assert_eq!(
            fold(&written, push.clone(), &PUSH).fold,
            Fold::Beats(vec![(0, Micros(7))])
        );
        // And a repeat that moves no time moves nothing.
        let mut same = written.clone();
        assert!(!set_heartbeat_times(
            &mut same,
            &push,
            StatusMode::Push,
            WALL
        ));
        assert_eq!(same, written);

        // One image fewer: a write, still no event.
        let mut fewer = push.clone();
        fewer.reported.as_mut().unwrap().images.pop();
        assert!(!heartbeat_only(&written, &fewer, StatusMode::Push));
        let (n, events, _) = write_of(fold(&written, fewer, &PUSH).fold);
        assert!(events.is_empty());
        assert_eq!(n.reported.images.len(), 1);
        // A push that does not name them leaves them as they are.
        let plain = pushed(READY, ConditionStatus::True, "KubeletReady", 8);
        assert!(heartbeat_only(&written, &plain, StatusMode::Push));
    }

    #[test]
    fn probe_mode_ignores_the_kubelets_ready() {
        let node = ready_node();
        let probe = FoldRules {
            mode: StatusMode::Probe,
            ..PUSH
        };
        let folded = fold(
            &node,
            pushed(READY, ConditionStatus::False, "KubeletNotReady", 7),
            &probe,
        );
        assert_eq!(folded.fold, Fold::Beats(vec![]));
        assert!(!folded.ready_beat);
        // Other conditions are still the kubelet's to report.
        let (_, events, _) = write_of(
            fold(
                &node,
                pushed(
                    "MemoryPressure",
                    ConditionStatus::False,
                    "KubeletHasSufficientMemory",
                    7,
                ),
                &probe,
            )
            .fold,
        );
        assert!(matches!(
            &events[..],
            [EventKind::ConditionChanged {
                from: None,
                to: ConditionStatus::False,
                ..
            }]
        ));
    }

    #[test]
    fn addresses_not_taken_change_nothing_but_times() {
        let node = ready_node();
        let mut push = pushed(READY, ConditionStatus::True, "KubeletReady", 7);
        push.addresses = Some(vec![ip("127.0.0.9")]);
        let folded = fold(&node, push, &PUSH);
        let mut expected = node.clone();
        expected.conditions[0].last_heartbeat = Micros(7);
        assert_eq!(folded.fold, Fold::Quiet(expected));
        assert!(folded
            .addresses_ignored
            .is_some_and(|why| why.contains("static")));
    }

    #[test]
    fn a_self_registered_node_takes_its_addresses_in_a_write() {
        let mut node = ready_node();
        node.source = crate::model::SELF_REGISTERED.into();
        let mut push = pushed(READY, ConditionStatus::True, "KubeletReady", 7);
        push.addresses = Some(vec![ip("127.0.0.9")]);
        let (written, events, addresses_moved) = write_of(fold(&node, push, &PUSH).fold);
        assert!(addresses_moved);
        assert_eq!(written.addresses, vec![ip("127.0.0.9")]);
        assert!(matches!(&events[..], [EventKind::AddressesChanged { .. }]));
    }

    #[test]
    fn too_many_new_condition_types_are_refused() {
        let node = ready_node();
        let mut push = PushedStatus::default();
        for i in 0..=crate::validation::MAX_EXTRA_CONDITIONS {
            push.conditions.push(PushedCondition {
                kind: format!("Custom{i}"),
                status: ConditionStatus::False,
                last_heartbeat: None,
                reason: String::new(),
                message: String::new(),
            });
        }
        let refused = fold_status(&node, push, &PUSH, WALL, |_| None).expect_err("too many");
        assert_eq!(refused.name, "edge-1");
    }
}
