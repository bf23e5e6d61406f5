//! nodekeeper's own endpoints: registry records, history, the registry at a
//! past time, store status and metrics.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use super::{bad_request, internal, not_found, refusal, Answer, AppState};
use tokio::sync::mpsc;

use crate::metrics::Exposition;
use crate::model::{Event, Micros};
use crate::store::{HistoryQuery, ReadPin, Store, StoreError};

/// A node as `/v1/nodes` serves it: the registry record and the newest heartbeat.
#[derive(Debug, Clone, serde::Serialize, Deserialize)]
pub struct NodeEntry {
    pub node: crate::model::Node,
    pub heartbeat: Option<Micros>,
}

pub(crate) async fn list_node_records(State(s): State<AppState>) -> Response {
    let entries: Vec<NodeEntry> = s
        .view
        .list()
        .into_iter()
        .map(|(node, heartbeat)| NodeEntry { node, heartbeat })
        .collect();
    Json(entries).into_response()
}

pub(crate) async fn get_node_record(State(s): State<AppState>, Path(name): Path<String>) -> Answer {
    let (node, heartbeat) = s.view.get(&name).ok_or_else(|| not_found("nodes", &name))?;
    Ok(Json(NodeEntry { node, heartbeat }).into_response())
}

/// Query of `/v1/history`, the same filters as `nodekeeper history`.
#[derive(Debug, Default, Deserialize)]
pub struct HistoryParams {
    pub node: Option<String>,
    pub since: Option<String>,
    pub until: Option<String>,
    pub condition: Option<String>,
    pub after: Option<u64>,
    pub limit: Option<usize>,
}

impl HistoryParams {
    /// Validates the parameters into a store query; times are RFC 3339 or ages (`10m`).
    pub fn to_query(&self, now: Micros) -> Result<HistoryQuery, String> {
        Ok(HistoryQuery {
            node: self.node.clone(),
            since: instant("since", &self.since, now)?,
            until: instant("until", &self.until, now)?,
            condition: self.condition.clone(),
            after_seq: self.after,
            limit: self.limit,
        })
    }
}

/// The query parameter `name`, an instant in RFC 3339 or an age (`10m`), if given.
pub(crate) fn instant(
    name: &str,
    value: &Option<String>,
    now: Micros,
) -> Result<Option<Micros>, String> {
    let parse = |t: &str| Micros::parse_instant(t, now).map_err(|e| format!("{name}: {e}"));
    value.as_deref().map(parse).transpose()
}

pub(crate) async fn history(
    State(s): State<AppState>,
    params: Result<Query<HistoryParams>, axum::extract::rejection::QueryRejection>,
) -> Answer {
    let Query(params) = params.map_err(|e| bad_request(e.body_text()))?;
    let mut query = params.to_query(Micros::now()).map_err(bad_request)?;
    let (store, checked) = (s.store.clone(), query.clone());
    blocking(move || store.check_query(&checked))
        .await?
        .map_err(store_error)?;
    // A cursor (`after`) behind the horizon lost events to pruning: say so.
    let horizon = s.store.horizon();
    let from = match query.after_seq {
        Some(after) if after > 0 && after < horizon => {
            let requested = after;
            return Err(store_error(StoreError::Expired { requested, horizon }));
        }
        Some(after) => after.max(horizon),
        None => horizon,
    };
    query.after_seq = Some(from);
    let pin = s.store.pin_history(from).map_err(store_error)?;
    let limit = query.limit;
    let body = stream_history(
        s.store.clone(),
        query,
        limit,
        pin,
        b"[".to_vec(),
        |e| serde_json::to_vec(e).ok(),
        |_| b"]".to_vec(),
    );
    Ok(super::json_response(body))
}

/// `work` on the blocking pool; its panic is a 500.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Response> {
    tokio::task::spawn_blocking(work).await.map_err(internal)
}

/// Events read from the store per page while streaming an answer.
const PAGE: usize = 500;

/// Streams history matching `query` into a response body: `head`, the JSON
/// of each event `item` keeps (comma-separated), then `tail`, which learns
/// the seq of the last item served when `limit` cut the answer short (there
/// is more after it). The store is read a page at a time on the blocking
/// pool, and at most a few pages are in memory, whatever the answer's size.
/// A failure half-way aborts the body, so the client sees an error rather
/// than a short answer.
pub(crate) fn stream_history(
    store: Arc<Store>,
    mut query: HistoryQuery,
    limit: Option<usize>,
    pin: ReadPin,
    head: Vec<u8>,
    item: impl Fn(&Event) -> Option<Vec<u8>> + Send + 'static,
    tail: impl FnOnce(Option<u64>) -> Vec<u8> + Send + 'static,
) -> Body {
    let (sender, receiver) = mpsc::channel::<std::io::Result<Bytes>>(4);
    tokio::spawn(async move {
        if sender.send(Ok(Bytes::from(head))).await.is_err() {
            return;
        }
        query.limit = None;
        let mut served = 0usize;
        let mut last_served = None;
        let mut cut = false;
        loop {
            let after = query.after_seq.unwrap_or(0);
            // One more than the limit: to know whether there is more.
            let want = limit.map_or(PAGE, |l| (l + 1).saturating_sub(served).clamp(1, PAGE));
            let (page_store, page_query) = (store.clone(), query.clone());
            let floor = pin.floor();
            let page = tokio::task::spawn_blocking(move || {
                let page = page_store.history_page_pinned(&page_query, want, floor)?;
                // A reader whose pin expired may have read holes: fail instead.
                page_store.check_kept(after)?;
                Ok::<_, StoreError>(page)
            })
            .await;
            let page = page.map_err(|e| e.to_string());
            let page = match page.and_then(|read| read.map_err(|e| e.to_string())) {
                Ok(page) => page,
                Err(e) => {
                    let _ = sender.send(Err(std::io::Error::other(e))).await;
                    return;
                }
            };
            let mut chunk = Vec::new();
            for e in &page.events {
                let Some(json) = item(e) else { continue };
                if limit.is_some_and(|l| served >= l) {
                    cut = true;
                    break;
                }
                if served > 0 {
                    chunk.push(b',');
                }
                chunk.extend_from_slice(&json);
                served += 1;
                last_served = Some(e.seq);
            }
            if !chunk.is_empty() && sender.send(Ok(Bytes::from(chunk))).await.is_err() {
                return;
            }
            match page.next_after {
                Some(next) if !cut => {
                    query.after_seq = Some(next);
                    pin.advance(next);
                }
                _ => break,
            }
        }
        drop(pin);
        let _ = sender
            .send(Ok(Bytes::from(tail(if cut { last_served } else { None }))))
            .await;
    });
    Body::from_stream(futures_util::stream::unfold(
        receiver,
        |mut rx| async move { rx.recv().await.map(|chunk| (chunk, rx)) },
    ))
}

/// A store failure as the API server would answer it.
pub(crate) fn store_error(e: StoreError) -> Response {
    match e {
        StoreError::UnknownNode(_) | StoreError::UnknownCondition { .. } => {
            refusal(StatusCode::NOT_FOUND, e)
        }
        StoreError::Expired { .. } | StoreError::BeforeHorizon(..) => {
            super::status_error(StatusCode::GONE, "Expired", e.to_string())
        }
        e => internal(e),
    }
}

/// The header of `GET /v1/at` that names the instant shown, in RFC 3339
/// (UTC): `time` resolved, when it was given as an age, by the server's clock.
const AT_HEADER: &str = "nodekeeper-at";

#[derive(Debug, Deserialize)]
pub(crate) struct AtParams {
    time: Option<String>,
    /// `true`: the registry records (as `/v1/nodes`) with the seq, for the CLI.
    records: Option<bool>,
}

pub(crate) async fn at(State(s): State<AppState>, Query(params): Query<AtParams>) -> Answer {
    let time = params
        .time
        .ok_or_else(|| bad_request("give ?time= as RFC 3339 or an age such as 10m"))?;
    let when = Micros::parse_instant(&time, Micros::now()).map_err(bad_request)?;
    let store = s.store.clone();
    let at = blocking(move || {
        // Nothing it reads goes while it reads.
        let _pin = store.pin_history(store.horizon())?;
        store.registry_at_time(when)
    })
    .await?
    .map_err(store_error)?;
    // The instant itself, so that a page given an age can name the time it means.
    let instant = [(AT_HEADER, when.rfc3339())];
    if params.records == Some(true) {
        return Ok((instant, Json(at)).into_response());
    }
    let nodes = at.nodes.values().map(|n| crate::k8s::node(n, None));
    Ok((instant, Json(crate::k8s::node_list(nodes, at.seq))).into_response())
}

pub(crate) async fn store_status(State(s): State<AppState>) -> Answer {
    let store = s.store.clone();
    let status = blocking(move || store.status()).await?.map_err(internal)?;
    Ok(Json(status).into_response())
}

/// `GET /metrics`, in the format `Accept` asks for (see [`Exposition`]).
pub(crate) async fn metrics(State(s): State<AppState>, headers: HeaderMap) -> Response {
    s.metrics.store_size.set(s.store.size_on_disk() as i64);
    if s.mirror.is_some() {
        let oldest = s
            .store
            .outbox()
            .ok()
            .and_then(|entries| entries.iter().map(|(_, e)| e.enqueued).min());
        let age = oldest.map_or(0.0, |t| crate::model::Micros::now().since(t).as_secs_f64());
        s.metrics.mirror_oldest_age.set(age);
    }
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = Exposition::negotiate(accept);
    // kube-state-metrics' node series, from the published nodes (kept
    // per node between scrapes; see metrics::nodes).
    let (_, shown) = s.view.shown();
    let pieces = s
        .metrics
        .encode_with_nodes(format, shown.iter().map(|n| &*n.node));
    let body = futures_util::stream::iter(
        pieces
            .into_iter()
            .filter(|p| !p.is_empty())
            .map(Ok::<_, std::convert::Infallible>),
    );
    (
        [(header::CONTENT_TYPE, format.content_type())],
        axum::body::Body::from_stream(body),
    )
        .into_response()
}

/// `GET /v1/sources`: how the cloud or inventory source is doing.
/// `GET /v1/mirror`: the mirror's backlog, last error and leadership.
pub(crate) async fn mirror(State(s): State<AppState>) -> Answer {
    let Some(mirror) = s.mirror.clone() else {
        return Err(refusal(
            StatusCode::NOT_FOUND,
            "no API server is configured (--kubeconfig or --master): nothing is mirrored",
        ));
    };
    let store = s.store.clone();
    let status = blocking(move || mirror.status(&store))
        .await?
        .map_err(internal)?;
    Ok(Json(status).into_response())
}

pub(crate) async fn sources(State(s): State<AppState>) -> Answer {
    let status = s.view.source_status().ok_or_else(|| {
        refusal(
            StatusCode::NOT_FOUND,
            "no cloud or inventory source is configured",
        )
    })?;
    Ok(Json(status).into_response())
}
