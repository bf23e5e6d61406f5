//! An event's one-line detail: what it changed, in the words `describe`,
//! `history` and a Kubernetes Event's message use.

use std::time::Duration;

use super::{Address, ConditionStatus, EventKind, NodeChange, Taint};

const NONE: &str = "<none>";

impl EventKind {
    /// One line describing what the event changed, as `describe` and
    /// `history` show it and a Kubernetes Event's message carries it.
    pub fn detail(&self) -> String {
        match self {
            EventKind::Registered { node } => {
                format!(
                    "from {}, addresses {}",
                    node.source,
                    addresses(&node.addresses)
                )
            }
            EventKind::Deleted { reason } => reason.clone(),
            EventKind::ConditionChanged {
                condition,
                from,
                to,
                reason,
                message,
            } => {
                let from = from.map_or(NONE, ConditionStatus::as_str);
                let why = match (reason.is_empty(), message.is_empty()) {
                    (true, true) => String::new(),
                    (false, true) => format!(" ({reason})"),
                    (true, false) => format!(" ({message})"),
                    (false, false) => format!(" ({reason}: {message})"),
                };
                format!("{condition}: {from} -> {to}{why}")
            }
            EventKind::AddressesChanged { from, to } => {
                format!("{} -> {}", addresses(from), addresses(to))
            }
            EventKind::AddressLookupFailed { message } => message.clone(),
            EventKind::RegistrationFailed { message } => message.clone(),
            EventKind::SourceFailed { source, message } => format!("{source}: {message}"),
            EventKind::ControllerStarted {
                instance,
                downtime_seconds,
                previous_stop_clean,
            } => match downtime_seconds {
                None => format!("instance {instance}, new store"),
                Some(secs) => {
                    // Stored data: a negative or non-finite value must not panic.
                    let down = Duration::try_from_secs_f64(*secs)
                        .map_or_else(|_| "?".to_string(), super::duration::age);
                    let stop = if *previous_stop_clean {
                        "clean"
                    } else {
                        "unclean"
                    };
                    format!("instance {instance}, down {down}, previous stop {stop}")
                }
            },
            EventKind::ControllerStopped { instance } => format!("instance {instance}"),
            EventKind::ProbeKeptReady { message } => message.clone(),
            EventKind::TaintsChanged { from, to } => {
                let show = |t: &[Taint]| {
                    if t.is_empty() {
                        "<none>".to_string()
                    } else {
                        t.iter()
                            .map(|t| format!("{}:{}", t.key, t.effect))
                            .collect::<Vec<_>>()
                            .join(",")
                    }
                };
                format!("{} -> {}", show(from), show(to))
            }
            EventKind::EvictionStarted { reason, mode } => format!("{mode}: {reason}"),
            EventKind::EvictionDone { result } => result.clone(),
            EventKind::OperatorChanged { by, changes } => {
                format!("by {by}: {}", describe_changes(changes))
            }
            EventKind::ObjectChanged {
                resource,
                name,
                action,
                summary,
            } => format!("{resource} {name} {action}: {summary}"),
            EventKind::KubeletEvent {
                component,
                event_type,
                reason,
                message,
                object,
            } => format!("{component}: {event_type} {reason} on {object}: {message}"),
            EventKind::CertificateIssued {
                csr,
                serial,
                not_after,
                requested_by,
                approval,
            } => format!(
                "client certificate serial {serial} until {} from CSR {csr}, requested by \
                 {requested_by}, {approval}",
                not_after.rfc3339()
            ),
        }
    }
}

/// What an operator changed, in kubectl's words: `cordoned; label
/// maintenance=true added; taint dedicated=gpu:NoSchedule added`.
pub fn describe_changes(changes: &[NodeChange]) -> String {
    use NodeChange as C;
    let kv = |k: &str, v: &str| {
        if v.is_empty() {
            k.to_string()
        } else {
            format!("{k}={v}")
        }
    };
    let keyed = |what: &str, key: &str, from: &Option<String>, to: &Option<String>| match (from, to)
    {
        (None, Some(v)) => format!("{what} {} added", kv(key, v)),
        (Some(_), None) => format!("{what} {key} removed"),
        (Some(a), Some(b)) => format!("{what} {key}: {a} -> {b}"),
        (None, None) => format!("{what} {key} unchanged"),
    };
    let taint = |t: &Taint| format!("{}:{}", kv(&t.key, &t.value), t.effect);
    let mut parts = Vec::new();
    for c in changes {
        match c {
            C::Unschedulable { to: true, .. } => parts.push("cordoned".to_string()),
            C::Unschedulable { to: false, .. } => parts.push("uncordoned".to_string()),
            C::Label { key, from, to } => parts.push(keyed("label", key, from, to)),
            C::Annotation { key, from, to } => parts.push(keyed("annotation", key, from, to)),
            C::Taints { from, to } => {
                let shown = |list: &[Taint]| list.iter().map(taint).collect::<Vec<_>>();
                let (before, after) = (shown(from), shown(to));
                for t in after.iter().filter(|t| !before.contains(t)) {
                    parts.push(format!("taint {t} added"));
                }
                for t in before.iter().filter(|t| !after.contains(t)) {
                    parts.push(format!("taint {t} removed"));
                }
                if before != after
                    && after.iter().all(|t| before.contains(t))
                    && before.len() == after.len()
                {
                    parts.push("taints reordered".to_string());
                }
            }
        }
    }
    parts.join("; ")
}

/// Addresses as `KIND=ADDRESS` pairs, comma-separated (`<none>` if none).
fn addresses(list: &[Address]) -> String {
    if list.is_empty() {
        return NONE.to_string();
    }
    list.iter()
        .map(|a| format!("{}={}", a.kind.as_str(), a.address))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::model::{AddressKind, Micros, Node, Resources};

    fn detail(kind: &EventKind) -> String {
        kind.detail()
    }

    /// A Ready transition, for tests here and in `output`.
    pub(crate) fn changed(
        from: Option<ConditionStatus>,
        to: ConditionStatus,
        reason: &str,
        message: &str,
    ) -> EventKind {
        EventKind::ConditionChanged {
            condition: "Ready".into(),
            from,
            to,
            reason: reason.into(),
            message: message.into(),
        }
    }

    fn registered() -> EventKind {
        let node = Node {
            name: "n1".into(),
            uid: "uid-n1".into(),
            created: Micros::parse_rfc3339("2026-11-30T09:23:09Z").expect("test time"),
            resource_version: 1,
            source: "static".into(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            external_id: String::new(),
            provider_id: String::new(),
            capacity: Resources::default(),
            unschedulable: false,
            taints: vec![],
            addresses: vec![
                Address {
                    kind: AddressKind::InternalIP,
                    address: "10.0.0.5".into(),
                },
                Address {
                    kind: AddressKind::Hostname,
                    address: "n1".into(),
                },
            ],
            conditions: vec![],
            node_info: Default::default(),
            reported: Default::default(),
        };
        EventKind::Registered {
            node: Box::new(node),
        }
    }

    #[test]
    fn event_details() {
        assert_eq!(
            detail(&registered()),
            "from static, addresses InternalIP=10.0.0.5,Hostname=n1"
        );
        assert_eq!(
            detail(&changed(
                Some(ConditionStatus::True),
                ConditionStatus::Unknown,
                "NodeStatusUnknown",
                "Kubelet stopped posting node status."
            )),
            "Ready: True -> Unknown (NodeStatusUnknown: Kubelet stopped posting node status.)"
        );
        assert_eq!(
            detail(&changed(None, ConditionStatus::True, "KubeletReady", "")),
            "Ready: <none> -> True (KubeletReady)"
        );
        assert_eq!(
            detail(&changed(None, ConditionStatus::False, "", "probe failed")),
            "Ready: <none> -> False (probe failed)"
        );
        assert_eq!(
            detail(&changed(None, ConditionStatus::False, "", "")),
            "Ready: <none> -> False"
        );
        assert_eq!(
            detail(&EventKind::AddressesChanged {
                from: vec![],
                to: vec![Address {
                    kind: AddressKind::ExternalIP,
                    address: "1.2.3.4".into()
                }],
            }),
            "<none> -> ExternalIP=1.2.3.4"
        );
        assert_eq!(
            detail(&EventKind::Deleted {
                reason: "no longer listed by source".into()
            }),
            "no longer listed by source"
        );
        assert_eq!(
            detail(&EventKind::AddressLookupFailed {
                message: "lookup n9: no such host".into()
            }),
            "lookup n9: no such host"
        );
        assert_eq!(
            detail(&EventKind::RegistrationFailed {
                message: "gave up after 10 tries".into()
            }),
            "gave up after 10 tries"
        );
        let started = |downtime_seconds, previous_stop_clean| EventKind::ControllerStarted {
            instance: "a1b2".into(),
            downtime_seconds,
            previous_stop_clean,
        };
        assert_eq!(detail(&started(None, false)), "instance a1b2, new store");
        assert_eq!(
            detail(&started(Some(125.7), true)),
            "instance a1b2, down 2m5s, previous stop clean"
        );
        assert_eq!(
            detail(&started(Some(7200.0), false)),
            "instance a1b2, down 120m, previous stop unclean"
        );
        assert_eq!(
            detail(&started(Some(-1.0), false)),
            "instance a1b2, down ?, previous stop unclean"
        );
        assert_eq!(
            detail(&started(Some(f64::NAN), true)),
            "instance a1b2, down ?, previous stop clean"
        );
        assert_eq!(
            detail(&EventKind::ControllerStopped {
                instance: "a1b2".into()
            }),
            "instance a1b2"
        );
    }

    #[test]
    fn operator_changes_read_like_kubectl() {
        use NodeChange as C;
        let t = |key: &str, value: &str, effect: &str| Taint {
            key: key.into(),
            value: value.into(),
            effect: effect.into(),
            added: None,
        };
        let kind = EventKind::OperatorChanged {
            by: "alice".into(),
            changes: vec![
                C::Unschedulable {
                    from: false,
                    to: true,
                },
                C::Label {
                    key: "maintenance".into(),
                    from: None,
                    to: Some("true".into()),
                },
                C::Label {
                    key: "zone".into(),
                    from: Some("a".into()),
                    to: Some("b".into()),
                },
                C::Annotation {
                    key: "ticket".into(),
                    from: Some("OPS-1".into()),
                    to: None,
                },
                C::Taints {
                    from: vec![
                        t("old", "", "NoSchedule"),
                        t("node.kubernetes.io/unreachable", "", "NoSchedule"),
                    ],
                    to: vec![
                        t("dedicated", "gpu", "NoExecute"),
                        t("node.kubernetes.io/unreachable", "", "NoSchedule"),
                    ],
                },
            ],
        };
        assert_eq!(
            detail(&kind),
            "by alice: cordoned; label maintenance=true added; label zone: a -> b; \
             annotation ticket removed; taint dedicated=gpu:NoExecute added; taint old:NoSchedule removed"
        );
    }
}
