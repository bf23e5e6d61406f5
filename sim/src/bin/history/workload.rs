//! A month of a flapping site's history, written as an export (format 1, so
//! any release imports it): the nodes registered, then Ready flips, taints
//! following them and probes that kept nodes Ready, spread evenly in time.
//!
//! `write_export` runs past ~80 lines: one pass over the month writing each
//! kind of event as it falls due, all of them sharing the nodes' states.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use anyhow::Result;
use nodekeeper::history::Replay;
use nodekeeper::model::{
    Address, AddressKind, Condition, ConditionStatus, Event, EventKind, Micros, Node, Taint,
};

/// What the readers need to know of the history written.
pub struct Facts {
    /// A node with as many events as any.
    pub busiest_node: String,
    /// The time of the event in the middle.
    pub middle: Micros,
}

const MONTH_MICROS: i64 = 30 * 24 * 3600 * 1_000_000;

fn name(i: usize) -> String {
    format!("edge-{i:05}")
}

fn node(i: usize, at: Micros) -> Node {
    let name = name(i);
    Node {
        uid: format!("00000000-0000-4000-8000-{i:012}"),
        created: at,
        resource_version: 0,
        source: "static".into(),
        annotations: BTreeMap::new(),
        labels: BTreeMap::from([
            ("kubernetes.io/hostname".into(), name.clone()),
            (
                "topology.kubernetes.io/zone".into(),
                format!("rack-{}", i % 20),
            ),
        ]),
        external_id: name.clone(),
        provider_id: String::new(),
        capacity: Default::default(),
        unschedulable: false,
        taints: vec![],
        addresses: vec![Address {
            kind: AddressKind::InternalIP,
            address: format!("10.{}.{}.{}", i / 65536, i / 256 % 256, i % 256),
        }],
        conditions: vec![Condition {
            kind: "Ready".into(),
            status: ConditionStatus::Unknown,
            last_heartbeat: at,
            last_transition: at,
            reason: "NodeStatusNeverUpdated".into(),
            message: "Kubelet never posted node status.".into(),
        }],
        node_info: Default::default(),
        name,
        reported: Default::default(),
    }
}

/// Writes `events` events about `nodes` nodes, ending a minute ago, to `path`.
pub fn write_export(path: &Path, nodes: usize, events: usize) -> Result<Facts> {
    let end = Micros::now().0 - 60_000_000;
    let start = end - MONTH_MICROS;
    let step = MONTH_MICROS / events.max(1) as i64;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    writeln!(
        out,
        "{}",
        serde_json::json!({
            "format": "nodekeeper-export", "version": 1, "exportedAt": Micros::now(),
            "lastSeq": events, "nodes": nodes, "events": events
        })
    )?;
    let mut replay = Replay::default();
    let mut rng = fastrand::Rng::with_seed(7);
    let mut middle = Micros(start);
    let write = |out: &mut std::io::BufWriter<std::fs::File>,
                 replay: &mut Replay,
                 event: Event|
     -> Result<()> {
        replay.apply(&event);
        serde_json::to_writer(&mut *out, &serde_json::json!({ "event": event }))?;
        out.write_all(b"\n")?;
        Ok(())
    };
    for i in 0..nodes.min(events) {
        let at = Micros(start);
        write(
            &mut out,
            &mut replay,
            Event {
                seq: i as u64 + 1,
                time: at,
                node: Some(name(i)),
                kind: EventKind::Registered {
                    node: Box::new(node(i, at)),
                },
            },
        )?;
    }
    for seq in nodes.min(events) as u64 + 1..=events as u64 {
        let time = Micros(start + step * seq as i64);
        if seq == events as u64 / 2 {
            middle = time;
        }
        let i = rng.usize(..nodes);
        let current = replay
            .nodes()
            .get(&name(i))
            .map_or(ConditionStatus::Unknown, |n| n.ready());
        let kind = match rng.u8(..100) {
            0..=79 => {
                let to = if current == ConditionStatus::True {
                    if rng.bool() {
                        ConditionStatus::False
                    } else {
                        ConditionStatus::Unknown
                    }
                } else {
                    ConditionStatus::True
                };
                let (reason, message) = match to {
                    ConditionStatus::True => ("KubeletReady", "kubelet /healthz endpoint returns ok".to_string()),
                    ConditionStatus::False => (
                        "KubeletNotReady",
                        "kubelet /healthz returned 500: [-]syncloop failed: PLEG is not healthy".to_string(),
                    ),
                    ConditionStatus::Unknown => (
                        "NodeStatusUnknown",
                        format!("Kubelet has not answered /healthz healthily for 40s: connect 10.0.{}.{}:10250: Connection refused (os error 111)", i / 256 % 256, i % 256),
                    ),
                };
                EventKind::ConditionChanged {
                    condition: "Ready".into(),
                    from: Some(current),
                    to,
                    reason: reason.into(),
                    message,
                }
            }
            80..=94 => {
                let taint = |key: &str| Taint {
                    key: key.into(),
                    value: String::new(),
                    effect: "NoSchedule".into(),
                    added: Some(time),
                };
                let from = replay
                    .nodes()
                    .get(&name(i))
                    .map(|n| n.taints.clone())
                    .unwrap_or_default();
                let to = if from.is_empty() {
                    vec![taint("node.kubernetes.io/unreachable")]
                } else {
                    vec![]
                };
                EventKind::TaintsChanged { from, to }
            }
            _ => EventKind::ProbeKeptReady {
                message: "heartbeats stopped but the kubelet answered /healthz: ok".into(),
            },
        };
        write(
            &mut out,
            &mut replay,
            Event {
                seq,
                time,
                node: Some(name(i)),
                kind,
            },
        )?;
    }
    for n in replay.nodes().values() {
        serde_json::to_writer(&mut out, &serde_json::json!({ "node": n }))?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(Facts {
        busiest_node: name(0),
        middle,
    })
}
