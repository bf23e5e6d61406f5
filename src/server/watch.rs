//! `GET /api/v1/nodes?watch=true`: a stream of `ADDED` / `MODIFIED` /
//! `DELETED` events built from the durable event log, so a watch resumes from
//! any resourceVersion still in the log — across controller restarts too.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::{status_error, AppState};
use crate::history::Replay;
use crate::model::{Event, EventKind, Node};
use crate::store::HistoryQuery;

/// How long a watch runs unless the client asks for less (the API server's
/// default minimum request timeout).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);
/// How often a bookmark is sent to clients that allow them.
const BOOKMARK_EVERY: Duration = Duration::from_secs(60);
/// Events read from the log per round, so one slow reader cannot hold much.
const PAGE: usize = 1000;

/// Keeps only some nodes (label and field selectors).
pub(crate) type NodeFilter = std::sync::Arc<dyn Fn(&Node) -> bool + Send + Sync>;
/// Renders a node for the stream (a Node, or a Table for kubectl).
pub(crate) type NodeRender = std::sync::Arc<dyn Fn(&Node) -> Value + Send + Sync>;

/// What a watch request asks for.
#[derive(Clone, Default)]
pub(crate) struct WatchParams {
    pub resource_version: Option<String>,
    pub timeout: Option<Duration>,
    pub bookmarks: bool,
    pub filter: Option<NodeFilter>,
    pub render: Option<NodeRender>,
}

/// Starts a watch; the response streams until the timeout, the client
/// leaves, or the server stops.
pub(crate) async fn watch_nodes(s: AppState, params: WatchParams) -> Response {
    let from = match params.resource_version.as_deref() {
        None | Some("") | Some("0") => None,
        Some(v) => match v.parse::<u64>() {
            Ok(v) => Some(v),
            Err(_) => {
                return status_error(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    format!("resourceVersion {v:?} is not one this server hands out"),
                )
            }
        },
    };
    let durable = s.store.durable_seq();
    let oldest = match first_seq(&s).await {
        Ok(seq) => seq,
        Err(r) => return r,
    };
    if let Some(v) = from {
        // Versions before the oldest kept event cannot be replayed.
        if oldest.is_some_and(|first| v.saturating_add(1) < first) {
            return status_error(
                StatusCode::GONE,
                "Expired",
                format!(
                    "too old resource version: {v} ({})",
                    oldest.unwrap_or(0) - 1
                ),
            );
        }
    }
    let (sender, receiver) = mpsc::channel::<Bytes>(64);
    tokio::spawn(stream_events(s, params, from, durable, sender));
    let body = Body::from_stream(futures_util::stream::unfold(
        receiver,
        |mut rx| async move {
            rx.recv()
                .await
                .map(|chunk| (Ok::<_, Infallible>(chunk), rx))
        },
    ));
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn first_seq(s: &AppState) -> Result<Option<u64>, Response> {
    let store = s.store.clone();
    let query = HistoryQuery {
        limit: Some(1),
        ..HistoryQuery::default()
    };
    match tokio::task::spawn_blocking(move || store.history(&query)).await {
        Ok(Ok(events)) => Ok(events.first().map(|e| e.seq)),
        Ok(Err(e)) => Err(super::internal(e)),
        Err(e) => Err(super::internal(e)),
    }
}

/// Reads durable events after `after`, in pages.
async fn read_after(s: &AppState, after: u64) -> Option<Vec<Event>> {
    let store = s.store.clone();
    let query = HistoryQuery {
        after_seq: Some(after),
        limit: Some(PAGE),
        ..HistoryQuery::default()
    };
    tokio::task::spawn_blocking(move || store.history(&query))
        .await
        .ok()?
        .ok()
}

fn line(kind: &str, object: Value) -> Bytes {
    let mut text = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    text.push(b'\n');
    Bytes::from(text)
}

async fn stream_events(
    s: AppState,
    params: WatchParams,
    from: Option<u64>,
    durable: u64,
    out: mpsc::Sender<Bytes>,
) {
    let render = |node: &Node| match &params.render {
        Some(render) => render(node),
        None => serde_json::to_value(crate::kube::node(node, None)).unwrap_or(Value::Null),
    };
    let keep = |node: &Node| params.filter.as_ref().is_none_or(|f| f(node));
    // The registry as of the starting version, rebuilt from the log.
    let start = from.unwrap_or(durable);
    let mut replay = Replay::default();
    let mut last = 0;
    while last < start {
        let Some(events) = read_after(&s, last).await else {
            return;
        };
        if events.is_empty() {
            break;
        }
        for e in events.iter().take_while(|e| e.seq <= start) {
            replay.apply(e);
            last = e.seq;
        }
        if events.last().is_some_and(|e| e.seq > start) {
            break;
        }
    }
    last = start;
    if from.is_none() {
        // Without a version the watch starts with the whole current list.
        for node in replay.nodes().values().filter(|n| keep(n)) {
            if out.send(line("ADDED", render(node))).await.is_err() {
                return;
            }
        }
    }
    let mut durable_rx = s.view.subscribe();
    let deadline = tokio::time::sleep(params.timeout.unwrap_or(DEFAULT_TIMEOUT));
    tokio::pin!(deadline);
    let mut bookmarks = tokio::time::interval(BOOKMARK_EVERY);
    bookmarks.reset();
    loop {
        let Some(events) = read_after(&s, last).await else {
            return;
        };
        for event in &events {
            let name = event.node.clone().unwrap_or_default();
            let before = replay.nodes().get(&name).cloned();
            replay.apply(event);
            last = event.seq;
            let after = replay.nodes().get(&name);
            let (kind, node) = match (&event.kind, before, after) {
                (EventKind::Registered { .. }, _, Some(node)) => ("ADDED", node.clone()),
                (EventKind::Deleted { .. }, Some(mut node), None) => {
                    node.resource_version = event.seq;
                    ("DELETED", node)
                }
                (
                    EventKind::ConditionChanged { .. }
                    | EventKind::AddressesChanged { .. }
                    | EventKind::TaintsChanged { .. }
                    | EventKind::OperatorChanged { .. },
                    Some(_),
                    Some(node),
                ) => ("MODIFIED", node.clone()),
                _ => continue,
            };
            if keep(&node) && out.send(line(kind, render(&node))).await.is_err() {
                return;
            }
        }
        if events.len() >= PAGE {
            continue;
        }
        tokio::select! {
            changed = durable_rx.changed() => if changed.is_err() { return },
            _ = &mut deadline => return,
            _ = s.shutdown.cancelled() => return,
            _ = out.closed() => return,
            _ = bookmarks.tick(), if params.bookmarks => {
                let mark = json!({"kind": "Node", "apiVersion": "v1", "metadata": {"resourceVersion": last.to_string()}});
                if out.send(line("BOOKMARK", mark)).await.is_err() {
                    return;
                }
            }
        }
    }
}
