//! Our history entries as Kubernetes `core/v1` Events, as the node
//! controller records node events.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

use super::{time, EVENT_COMPONENT, EVENT_NAMESPACE};
use crate::model;

/// The start of an `EventList`'s JSON, up to its first item, for a list
/// streamed from the history; [`super::list_tail`] ends it.
pub const EVENT_LIST_HEAD: &[u8] = br#"{"kind":"EventList","apiVersion":"v1","items":["#;

/// A node's history entry as a `core/v1` Event, as the node controller
/// records node events (namespace `default`, `involvedObject` the Node);
/// `None` for controller-wide entries, which concern no node.
///
/// `involvedObject.uid` is the node *name*, the kubelet's convention for
/// node events: kubectl describe node selects events by `uid=<name>` (1.32
/// also asks by the real UID), and a name stays valid after the node is gone.
pub fn node_event(e: &model::Event) -> Option<Event> {
    let node = e.node.as_deref()?;
    let mut event = match &e.kind {
        model::EventKind::KubeletEvent {
            component,
            event_type,
            reason,
            message,
            object,
        } => kubelet_event(node, component, event_type, reason, message, object),
        kind => Event {
            involved_object: ObjectReference {
                api_version: Some("v1".to_string()),
                kind: Some("Node".to_string()),
                name: Some(node.to_string()),
                uid: Some(node.to_string()),
                ..ObjectReference::default()
            },
            reason: Some(event_reason(kind)),
            message: Some(kind.detail()),
            type_: Some(event_type(kind).to_string()),
            source: Some(EventSource {
                component: Some(EVENT_COMPONENT.to_string()),
                host: None,
            }),
            reporting_component: Some(EVENT_COMPONENT.to_string()),
            action: Some(kind.name().to_string()),
            ..Event::default()
        },
    };
    // What every entry's Event has alike: its name, version and time.
    let at = time(e.time);
    event.metadata = ObjectMeta {
        // Unique and stable: the store's sequence number, like the API server's `<object>.<hex>`.
        name: Some(format!("{node}.{:016x}", e.seq)),
        namespace: Some(EVENT_NAMESPACE.to_string()),
        resource_version: Some(e.seq.to_string()),
        creation_timestamp: Some(at.clone()),
        ..ObjectMeta::default()
    };
    event.count = Some(1);
    event.first_timestamp = Some(at.clone());
    event.last_timestamp = Some(at);
    event.event_time = Some(MicroTime(e.time.timestamp()));
    Some(event)
}

/// An Event a node's kubelet posted, as it posted it: its reason, type
/// and message, from its component on the node's host, about the node or
/// an object on it (`Kind/name` or `Kind/namespace/name`).
fn kubelet_event(
    node: &str,
    component: &str,
    event_type: &str,
    reason: &str,
    message: &str,
    object: &str,
) -> Event {
    let mut parts = object.splitn(3, '/');
    let kind = parts.next().unwrap_or_default().to_string();
    let (namespace, name) = match (parts.next(), parts.next()) {
        (Some(ns), Some(name)) => (Some(ns.to_string()), name.to_string()),
        (Some(name), None) => (None, name.to_string()),
        _ => (None, node.to_string()),
    };
    let is_node = kind == "Node";
    Event {
        involved_object: ObjectReference {
            api_version: Some("v1".to_string()),
            // A node's events carry its name as uid, as the kubelet's do.
            uid: is_node.then(|| name.clone()),
            kind: Some(kind),
            namespace,
            name: Some(name),
            ..ObjectReference::default()
        },
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        type_: Some(event_type.to_string()),
        source: Some(EventSource {
            component: Some(component.to_string()),
            host: Some(node.to_string()),
        }),
        reporting_component: Some(component.to_string()),
        reporting_instance: Some(node.to_string()),
        ..Event::default()
    }
}

/// The reason of a condition change is the condition's own (`KubeletReady`,
/// `NodeStatusUnknown`); every other entry is named by its kind.
fn event_reason(kind: &model::EventKind) -> String {
    match kind {
        model::EventKind::ConditionChanged { reason, .. } if !reason.is_empty() => reason.clone(),
        other => other.name().to_string(),
    }
}

/// `Warning` when something went wrong: Ready leaving True, a pressure
/// condition (where True is the bad state) becoming True, a failed lookup or
/// registration; `Normal` otherwise.
fn event_type(kind: &model::EventKind) -> &'static str {
    use model::{ConditionStatus as S, EventKind as K};
    let warning = match kind {
        K::ConditionChanged { condition, to, .. } => matches!(
            (condition == model::READY, to),
            (_, S::Unknown) | (true, S::False) | (false, S::True)
        ),
        K::AddressLookupFailed { .. } | K::RegistrationFailed { .. } | K::SourceFailed { .. } => {
            true
        }
        _ => false,
    };
    if warning {
        "Warning"
    } else {
        "Normal"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ConditionStatus, Micros};
    use serde_json::{json, Value};

    fn at(s: &str) -> Micros {
        Micros::parse_rfc3339(s).expect("test time")
    }

    fn to_json<T: serde::Serialize>(v: &T) -> Value {
        serde_json::to_value(v).expect("serializable")
    }

    fn history(seq: u64, node: Option<&str>, kind: model::EventKind) -> model::Event {
        model::Event {
            seq,
            time: Micros(at("2026-11-30T10:00:40Z").0 + 250_000),
            node: node.map(str::to_string),
            kind,
        }
    }

    fn ready_change(to: model::ConditionStatus, reason: &str) -> model::EventKind {
        model::EventKind::ConditionChanged {
            condition: model::READY.into(),
            from: Some(ConditionStatus::True),
            to,
            reason: reason.into(),
            message: "Kubelet stopped posting node status.".into(),
        }
    }

    #[test]
    fn node_events_are_core_v1_events() {
        let e = history(
            300,
            Some("edge-1"),
            ready_change(ConditionStatus::Unknown, "NodeStatusUnknown"),
        );
        let v = to_json(&node_event(&e).expect("a node event"));
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["kind"], "Event");
        assert_eq!(v["metadata"]["name"], "edge-1.000000000000012c");
        assert_eq!(v["metadata"]["namespace"], "default");
        assert_eq!(v["metadata"]["resourceVersion"], "300");
        assert_eq!(
            v["involvedObject"],
            json!({"apiVersion": "v1", "kind": "Node", "name": "edge-1", "uid": "edge-1"})
        );
        assert_eq!(v["reason"], "NodeStatusUnknown");
        assert_eq!(v["type"], "Warning");
        assert_eq!(
            v["message"],
            "Ready: True -> Unknown (NodeStatusUnknown: Kubelet stopped posting node status.)"
        );
        assert_eq!(v["count"], 1);
        assert_eq!(v["firstTimestamp"], "2026-11-30T10:00:40Z");
        assert_eq!(v["lastTimestamp"], "2026-11-30T10:00:40Z");
        assert_eq!(v["eventTime"], "2026-11-30T10:00:40.250000Z");
        assert_eq!(v["source"], json!({"component": "nodekeeper"}));
        assert_eq!(v["reportingComponent"], "nodekeeper");
    }

    #[test]
    fn event_reasons_and_types() {
        let of = |kind| {
            let e = node_event(&history(1, Some("n"), kind)).expect("a node event");
            (e.reason.expect("reason"), e.type_.expect("type"))
        };
        let pair = |r: &str, t: &str| (r.to_string(), t.to_string());
        assert_eq!(
            of(ready_change(ConditionStatus::True, "KubeletReady")),
            pair("KubeletReady", "Normal")
        );
        assert_eq!(
            of(ready_change(ConditionStatus::False, "KubeletNotReady")),
            pair("KubeletNotReady", "Warning")
        );
        // Without a reason the event kind names it.
        assert_eq!(
            of(ready_change(ConditionStatus::False, "")),
            pair("ConditionChanged", "Warning")
        );
        // For pressure conditions True is the bad news.
        let pressure = |to| model::EventKind::ConditionChanged {
            condition: "MemoryPressure".into(),
            from: None,
            to,
            reason: String::new(),
            message: String::new(),
        };
        assert_eq!(of(pressure(ConditionStatus::True)).1, "Warning");
        assert_eq!(of(pressure(ConditionStatus::False)).1, "Normal");
        assert_eq!(
            of(model::EventKind::AddressLookupFailed {
                message: "no such host".into()
            }),
            pair("AddressLookupFailed", "Warning")
        );
        assert_eq!(
            of(model::EventKind::Deleted {
                reason: "gone from the source".into()
            }),
            pair("Deleted", "Normal")
        );
    }

    #[test]
    fn controller_events_concern_no_node() {
        let e = history(
            1,
            None,
            model::EventKind::ControllerStopped {
                instance: "x".into(),
            },
        );
        assert!(node_event(&e).is_none());
    }
}
