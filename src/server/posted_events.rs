//! Events kubelets post (`core/v1`, and `events.k8s.io/v1` as newer
//! recorders send them), kept in the node's history as `KubeletEvent`s:
//! `kubectl get events` and `describe node` show them beside nodekeeper's.
//!
//! A v1.33 kubelet records through client-go's `tools/record` (wired at
//! `cmd/kubelet/app/server.go:570-583`): `POST .../namespaces/NS/events`,
//! and for a repeat within 10 minutes a `PATCH` of the same name, which
//! falls back to a `POST` on 404 (`tools/record/event.go` `recordEvent`).
//! Events are not kept by name here, so every `PATCH` is that 404 and each
//! occurrence is a history entry of its own. Any refusal is dropped by the
//! recorder with one log line, never retried (`event.go:355-365`).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::events::v1::Event as EventsEvent;
use serde_json::Value;

use super::push::{json_body, push_error, ContentType};
use super::{Answer, AppState, Caller};
use crate::controller::WriteRequest;
use crate::model::EventKind;

/// Longest reason kept, in bytes (kube-apiserver's is 128 for events.k8s.io).
const MAX_REASON: usize = 128;
/// Longest message kept, in bytes (events.k8s.io's `note` is 1 kB at most);
/// longer ones are cut, as recorders cut theirs.
const MAX_MESSAGE: usize = 1024;
/// Longest component and object reference kept.
const MAX_NAME: usize = 253;

/// What is kept of a posted Event.
struct Posted {
    node: Option<String>,
    component: String,
    event_type: String,
    reason: String,
    message: String,
    kind: String,
    namespace: Option<String>,
    name: String,
}

/// `POST /api/v1/namespaces/{namespace}/events`.
pub(crate) async fn post_core_event(
    State(s): State<AppState>,
    Path(_namespace): Path<String>,
    caller: Caller,
    ct: ContentType,
    body: Bytes,
) -> Answer {
    let event = json_body::<CoreEvent>(ct.as_str(), &body)?;
    let source = event.source.clone().unwrap_or_default();
    let object = &event.involved_object;
    let kind = object.kind.clone().unwrap_or_default();
    let posted = Posted {
        node: source
            .host
            .clone()
            .or_else(|| (kind == "Node").then(|| object.name.clone()).flatten()),
        component: source
            .component
            .or(event.reporting_component.clone())
            .unwrap_or_default(),
        event_type: event.type_.clone().unwrap_or_default(),
        reason: event.reason.clone().unwrap_or_default(),
        message: event.message.clone().unwrap_or_default(),
        kind,
        namespace: object.namespace.clone(),
        name: object.name.clone().unwrap_or_default(),
    };
    keep(&s, &caller, posted, serde_json::to_value(&event)).await
}

/// `POST /apis/events.k8s.io/v1/namespaces/{namespace}/events`.
pub(crate) async fn post_events_event(
    State(s): State<AppState>,
    Path(_namespace): Path<String>,
    caller: Caller,
    ct: ContentType,
    body: Bytes,
) -> Answer {
    let event = json_body::<EventsEvent>(ct.as_str(), &body)?;
    let regarding = event.regarding.clone().unwrap_or_default();
    let kind = regarding.kind.clone().unwrap_or_default();
    let posted = Posted {
        node: event
            .reporting_instance
            .clone()
            .or_else(|| (kind == "Node").then(|| regarding.name.clone()).flatten()),
        component: event.reporting_controller.clone().unwrap_or_default(),
        event_type: event.type_.clone().unwrap_or_default(),
        reason: event.reason.clone().unwrap_or_default(),
        message: event.note.clone().unwrap_or_default(),
        kind,
        namespace: regarding.namespace.clone(),
        name: regarding.name.clone().unwrap_or_default(),
    };
    keep(&s, &caller, posted, serde_json::to_value(&event)).await
}

/// `PATCH .../namespaces/{namespace}/events/{name}`: never found, so the
/// recorder posts the repeat as a new Event.
pub(crate) async fn patch_event(Path((_namespace, name)): Path<(String, String)>) -> Response {
    super::not_found("events", &name)
}

/// Keeps `posted` in its node's history, answering with the Event as sent.
async fn keep(
    s: &AppState,
    caller: &Caller,
    posted: Posted,
    sent: Result<Value, serde_json::Error>,
) -> Answer {
    // A node's token posts for its own node, whatever the Event says.
    let node = match caller {
        Caller::Node(own) => own.clone(),
        _ => posted.node.filter(|n| !n.is_empty()).ok_or_else(|| {
            super::push::invalid(
                "Event",
                "",
                "source.host: Required value: nodekeeper keeps an Event in the history of \
                 the node that posts it; name it in source.host (reportingInstance for \
                 events.k8s.io)"
                    .into(),
            )
        })?,
    };
    super::check_may_write_node(caller, &node)?;
    let object = match &posted.namespace {
        Some(ns) if !ns.is_empty() => format!("{}/{ns}/{}", posted.kind, posted.name),
        _ => format!("{}/{}", posted.kind, posted.name),
    };
    let kind = EventKind::KubeletEvent {
        component: cut(posted.component, MAX_NAME),
        event_type: cut(posted.event_type, MAX_NAME),
        reason: cut(posted.reason, MAX_REASON),
        message: cut(posted.message, MAX_MESSAGE),
        object: cut(object, 3 * MAX_NAME),
    };
    s.controller
        .write(|reply| WriteRequest::KubeletEvent {
            name: node,
            kind,
            reply,
        })
        .await
        .map_err(push_error)?;
    Ok((StatusCode::CREATED, Json(sent.unwrap_or_default())).into_response())
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn cut(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}
