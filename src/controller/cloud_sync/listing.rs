//! Deciding what one source listing changes in the registry: a pure
//! function of (listing, registry, now), so every rule of following a
//! source is tested without a store, a provider or a clock.

use std::collections::{BTreeMap, HashSet};

use crate::model::{ConditionStatus, EventKind, Micros, Node, NodeSpec, Taint, READY};
use crate::source::cloud::{CloudNode, InstanceState};

use super::TAINT_SHUTDOWN;

/// What following one listing does to the registry.
#[derive(Debug, Default, PartialEq)]
pub struct ListingPlan {
    /// Listed machines with no node yet, in listing order.
    pub register: Vec<NodeSpec>,
    /// Listed nodes whose taints or addresses follow their machine: the
    /// node as it becomes and the events that explain it.
    pub update: Vec<(Node, Vec<EventKind>)>,
    /// Nodes from this source that it no longer lists.
    pub delete: Vec<String>,
    /// Listed nodes that stay as they are.
    pub keep: Vec<String>,
}

impl ListingPlan {
    /// Whether the registry needs a write (registration aside).
    pub fn writes(&self) -> bool {
        !self.update.is_empty() || !self.delete.is_empty()
    }
}

/// Plans following `machines`, the whole listing of the source named
/// `source` (`cloud/<provider>`), against `registry`.
///
/// Only nodes from this source are deleted when it stops listing them; a
/// listed machine whose node came from elsewhere (the static list) still
/// follows the machine's state and addresses, as it did when registered.
pub fn plan_listing<'a>(
    machines: &[CloudNode],
    registry: impl IntoIterator<Item = &'a Node>,
    source: &str,
    now: Micros,
) -> ListingPlan {
    let by_name: BTreeMap<&str, &CloudNode> =
        machines.iter().map(|m| (m.spec.name.as_str(), m)).collect();
    let mut plan = ListingPlan::default();
    let mut registered = HashSet::new();
    for node in registry {
        registered.insert(node.name.as_str());
        match by_name.get(node.name.as_str()) {
            None if node.source == source => plan.delete.push(node.name.clone()),
            None => {}
            Some(machine) => match follow_machine(node, machine, now) {
                Some(change) => plan.update.push(change),
                None => plan.keep.push(node.name.clone()),
            },
        }
    }
    plan.register = machines
        .iter()
        .filter(|m| !registered.contains(m.spec.name.as_str()))
        .map(|m| m.spec.clone())
        .collect();
    plan
}

/// A registered node brought in line with its machine: the shutdown taint
/// while the machine is stopped (and the node not Ready), and the machine's
/// addresses when it reports any. `None` when nothing changes.
pub fn follow_machine(
    node: &Node,
    machine: &CloudNode,
    now: Micros,
) -> Option<(Node, Vec<EventKind>)> {
    let mut node = node.clone();
    let mut events = Vec::new();
    let tainted = node.taints.iter().any(|x| x.key == TAINT_SHUTDOWN);
    // A source that says "stopped" about a node that answers Ready is
    // behind (or wrong): the node's own word wins, as upstream.
    let ready = node
        .condition(READY)
        .is_some_and(|c| c.status == ConditionStatus::True);
    let stopped = machine.state == InstanceState::Stopped && !ready;
    if stopped != tainted {
        let from = node.taints.clone();
        if stopped {
            node.taints.push(Taint {
                key: TAINT_SHUTDOWN.into(),
                value: String::new(),
                effect: "NoSchedule".into(),
                added: Some(now),
            });
        } else {
            node.taints.retain(|x| x.key != TAINT_SHUTDOWN);
        }
        events.push(EventKind::TaintsChanged {
            from,
            to: node.taints.clone(),
        });
    }
    let addresses = &machine.spec.addresses;
    if !addresses.is_empty() && *addresses != node.addresses {
        events.push(EventKind::AddressesChanged {
            from: std::mem::replace(&mut node.addresses, addresses.clone()),
            to: addresses.clone(),
        });
    }
    (!events.is_empty()).then_some((node, events))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Address, AddressKind, Condition, Resources};

    const SOURCE: &str = "cloud/fake";
    const NOW: Micros = Micros(7_000_000);

    fn address(ip: &str) -> Vec<Address> {
        vec![Address {
            kind: AddressKind::InternalIP,
            address: ip.into(),
        }]
    }

    fn machine(name: &str, ip: &str, state: InstanceState) -> CloudNode {
        CloudNode {
            spec: NodeSpec {
                name: name.into(),
                source: SOURCE.into(),
                labels: BTreeMap::new(),
                external_id: format!("i-{name}"),
                provider_id: format!("fake://{name}"),
                capacity: Resources::default(),
                addresses: address(ip),
            },
            state,
        }
    }

    fn node(name: &str, source: &str, ip: &str, ready: ConditionStatus) -> Node {
        Node {
            name: name.into(),
            uid: format!("u-{name}"),
            created: Micros(1_000_000),
            resource_version: 1,
            source: source.into(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            external_id: format!("i-{name}"),
            provider_id: format!("fake://{name}"),
            capacity: Resources::default(),
            unschedulable: false,
            taints: Vec::new(),
            addresses: address(ip),
            conditions: vec![Condition {
                kind: READY.into(),
                status: ready,
                last_heartbeat: Micros(2_000_000),
                last_transition: Micros(1_000_000),
                reason: String::new(),
                message: String::new(),
            }],
            node_info: Default::default(),
            reported: Default::default(),
        }
    }

    fn shutdown_taint() -> Taint {
        Taint {
            key: TAINT_SHUTDOWN.into(),
            value: String::new(),
            effect: "NoSchedule".into(),
            added: Some(NOW),
        }
    }

    use ConditionStatus::{False, True, Unknown};
    use InstanceState::{Running, Stopped};

    #[test]
    fn new_machines_are_registered_and_listed_nodes_kept() {
        let machines = [
            machine("a", "10.0.0.1", Running),
            machine("b", "10.0.0.2", Running),
        ];
        let registry = [node("a", SOURCE, "10.0.0.1", True)];
        let plan = plan_listing(&machines, &registry, SOURCE, NOW);
        assert_eq!(plan.register, [machines[1].spec.clone()]);
        assert_eq!(plan.keep, ["a"]);
        assert!(plan.update.is_empty() && plan.delete.is_empty());
        assert!(!plan.writes(), "registration is not the plan's write");
    }

    #[test]
    fn only_this_sources_unlisted_nodes_are_deleted() {
        let registry = [
            node("gone", SOURCE, "10.0.0.1", True),
            node("static-1", "static", "10.0.0.2", True),
            node("other", "cloud/ec2", "10.0.0.3", True),
        ];
        let plan = plan_listing(&[], &registry, SOURCE, NOW);
        assert_eq!(plan.delete, ["gone"]);
        assert!(plan.register.is_empty() && plan.update.is_empty() && plan.keep.is_empty());
        assert!(plan.writes());
    }

    #[test]
    fn a_stopped_machine_taints_its_node_until_it_runs_again() {
        let registry = [node("a", SOURCE, "10.0.0.1", Unknown)];
        let plan = plan_listing(&[machine("a", "10.0.0.1", Stopped)], &registry, SOURCE, NOW);
        let [(tainted, events)] = &plan.update[..] else {
            panic!("one update: {plan:?}");
        };
        assert_eq!(tainted.taints, [shutdown_taint()]);
        assert_eq!(
            events,
            &[EventKind::TaintsChanged {
                from: vec![],
                to: vec![shutdown_taint()]
            }]
        );
        // Stopped again: nothing more to do.
        let registry = [tainted.clone()];
        let plan = plan_listing(&[machine("a", "10.0.0.1", Stopped)], &registry, SOURCE, NOW);
        assert_eq!(plan.keep, ["a"]);
        // Running again: the taint goes.
        let plan = plan_listing(&[machine("a", "10.0.0.1", Running)], &registry, SOURCE, NOW);
        assert_eq!(plan.update[0].0.taints, []);
    }

    #[test]
    fn a_ready_node_wins_over_a_stopped_machine() {
        let registry = [node("a", SOURCE, "10.0.0.1", True)];
        let plan = plan_listing(&[machine("a", "10.0.0.1", Stopped)], &registry, SOURCE, NOW);
        assert_eq!(plan.keep, ["a"]);
        // Not Ready (False as well as Unknown) takes the taint.
        let registry = [node("a", SOURCE, "10.0.0.1", False)];
        let plan = plan_listing(&[machine("a", "10.0.0.1", Stopped)], &registry, SOURCE, NOW);
        assert_eq!(plan.update.len(), 1);
        // A tainted node that answers Ready again loses the taint.
        let mut tainted = node("a", SOURCE, "10.0.0.1", True);
        tainted.taints.push(shutdown_taint());
        let plan = plan_listing(
            &[machine("a", "10.0.0.1", Stopped)],
            [&tainted],
            SOURCE,
            NOW,
        );
        assert_eq!(plan.update[0].0.taints, []);
    }

    #[test]
    fn addresses_follow_the_machine_unless_it_reports_none() {
        let registry = [node("a", SOURCE, "10.0.0.1", True)];
        let plan = plan_listing(&[machine("a", "10.0.0.9", Running)], &registry, SOURCE, NOW);
        let [(moved, events)] = &plan.update[..] else {
            panic!("one update: {plan:?}");
        };
        assert_eq!(moved.addresses, address("10.0.0.9"));
        assert_eq!(
            events,
            &[EventKind::AddressesChanged {
                from: address("10.0.0.1"),
                to: address("10.0.0.9")
            }]
        );
        let mut silent = machine("a", "", Running);
        silent.spec.addresses.clear();
        let plan = plan_listing(&[silent], &registry, SOURCE, NOW);
        assert_eq!(
            plan.keep,
            ["a"],
            "no addresses is not \"no longer has any\""
        );
    }

    #[test]
    fn a_static_node_the_source_lists_follows_it_and_is_not_registered_twice() {
        let registry = [node("a", "static", "10.0.0.1", Unknown)];
        let plan = plan_listing(&[machine("a", "10.0.0.1", Stopped)], &registry, SOURCE, NOW);
        assert!(plan.register.is_empty());
        assert_eq!(plan.update[0].0.taints, [shutdown_taint()]);
        assert_eq!(plan.update[0].0.source, "static", "its source stays");
    }

    #[test]
    fn a_stopped_machine_registered_now_is_tainted_on_the_second_plan() {
        // The shell registers first and plans again with the new node.
        let machines = [machine("new", "10.0.0.5", Stopped)];
        let first = plan_listing(&machines, [], SOURCE, NOW);
        assert_eq!(first.register.len(), 1);
        let registered = node("new", SOURCE, "10.0.0.5", Unknown);
        let second = plan_listing(&machines, [&registered], SOURCE, NOW);
        assert!(second.register.is_empty());
        assert_eq!(second.update[0].0.taints, [shutdown_taint()]);
    }

    #[test]
    fn taint_and_address_changes_come_in_one_update() {
        let registry = [node("a", SOURCE, "10.0.0.1", Unknown)];
        let plan = plan_listing(&[machine("a", "10.0.0.2", Stopped)], &registry, SOURCE, NOW);
        let [(_, events)] = &plan.update[..] else {
            panic!("one update: {plan:?}");
        };
        assert!(matches!(
            events[..],
            [
                EventKind::TaintsChanged { .. },
                EventKind::AddressesChanged { .. }
            ]
        ));
    }
}
