//! `/api/v1/events`: the nodes' history as `core/v1` Events (what `kubectl describe node` shows).

use std::collections::BTreeMap;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;

use super::params::{wants_table, ListParams, ListQuery};
use super::v1::stream_history;
use super::{bad_request, internal, not_found, paging, status_error, table, Answer, AppState};
use crate::k8s::EVENT_NAMESPACE;
use crate::model::Micros;
use crate::store::HistoryQuery;

/// The fields events can be selected by, as in kube-apiserver.
const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
    "metadata.name",
    "metadata.namespace",
];

/// `GET /api/v1/events` and `/api/v1/namespaces/{namespace}/events`:
/// events as an `EventList` or a `Table`, a page at a time, streamed
/// from the history. Over 80 lines: the request's checks, the page's start and
/// the two shapes share one query, one pinned history and one list tail.
pub(crate) async fn list_events(
    State(s): State<AppState>,
    namespace: Option<Path<String>>,
    headers: HeaderMap,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Answer {
    let namespace = namespace.map(|Path(ns)| ns);
    let (params, watch) = ListParams::list(params)?;
    if watch {
        return Err(super::watch_not_served("events"));
    }
    let query = params.query(EVENT_FIELDS).map_err(bad_request)?;
    // Pages continue after the seq of the last event served.
    let (rv, after) = match &query.continue_from {
        Some(token) => match token.start.trim_end_matches('\u{0}').parse::<u64>() {
            Ok(seq) => (token.rv, Some(seq)),
            Err(_) => {
                return Err(bad_request(
                    "invalid continue token: continue key is not valid",
                ))
            }
        },
        None => (s.store.durable_seq(), None),
    };
    let horizon = s.store.horizon();
    if after.is_some_and(|a| a < horizon) {
        return Err(status_error(
            StatusCode::GONE,
            "Expired",
            "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.".into(),
        ));
    }
    let from = after.unwrap_or(0).max(horizon);
    let pin = s.store.pin_history(from).map_err(super::v1::store_error)?;
    // One node's history is read through the store's per-node index.
    let history_query = HistoryQuery {
        node: query
            .fields
            .required("involvedObject.name")
            .map(str::to_string),
        after_seq: Some(from),
        ..HistoryQuery::default()
    };
    let limit = params.limit.filter(|&l| l > 0).map(|l| l as usize);
    let include = query.include;
    let now = Micros::now();
    let keep = move |e: &crate::model::Event| {
        crate::k8s::node_event(e)
            .filter(|e| namespace.is_none() || e.metadata.namespace == namespace)
            .filter(|e| selected(&query, e))
    };
    let tail = move |cut: Option<u64>| {
        crate::k8s::list_tail(&ListMeta {
            resource_version: Some(rv.to_string()),
            continue_: cut
                .map(|seq| paging::ContinueToken::after(rv, &format!("{seq:020}")).encode()),
            ..ListMeta::default()
        })
    };
    let as_table = wants_table(&headers);
    let head = if as_table {
        table::event_table_head()
    } else {
        crate::k8s::EVENT_LIST_HEAD.to_vec()
    };
    let item = move |e: &crate::model::Event| {
        let event = keep(e)?;
        if as_table {
            table::event_table_row(&event, include, now)
        } else {
            serde_json::to_vec(&event).ok()
        }
    };
    let body = stream_history(s.store.clone(), history_query, limit, pin, head, item, tail);
    Ok(super::json_response(body))
}

/// `GET /api/v1/namespaces/{namespace}/events/{name}`.
pub(crate) async fn get_event(
    State(s): State<AppState>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Answer {
    let include = ListParams::get(params)?;
    // Names are `<node>.<seq in hex>`; anything else was never ours.
    let seq = name
        .rsplit_once('.')
        .and_then(|(_, hex)| u64::from_str_radix(hex, 16).ok())
        .filter(|&seq| namespace == EVENT_NAMESPACE && seq != 0)
        .ok_or_else(|| not_found("events", &name))?;
    let query = HistoryQuery {
        after_seq: Some(seq - 1),
        limit: Some(1),
        ..HistoryQuery::default()
    };
    let event = history(&s, query)
        .await?
        .first()
        .filter(|e| e.seq == seq)
        .and_then(crate::k8s::node_event)
        .filter(|e| e.metadata.name.as_deref() == Some(name.as_str()))
        .ok_or_else(|| not_found("events", &name))?;
    if wants_table(&headers) {
        let metadata = ListMeta {
            resource_version: event.metadata.resource_version.clone(),
            ..ListMeta::default()
        };
        let table = table::event_table(&[event], metadata, include, Micros::now());
        return Ok(Json(table).into_response());
    }
    Ok(Json(event).into_response())
}

fn selected(query: &ListQuery, e: &Event) -> bool {
    let o = &e.involved_object;
    let source = e.source.as_ref().and_then(|s| s.component.as_deref());
    let matches_fields = query.fields.matches(|field| match field {
        "involvedObject.kind" => o.kind.as_deref(),
        "involvedObject.namespace" => o.namespace.as_deref(),
        "involvedObject.name" => o.name.as_deref(),
        "involvedObject.uid" => o.uid.as_deref(),
        "involvedObject.apiVersion" => o.api_version.as_deref(),
        "involvedObject.resourceVersion" => o.resource_version.as_deref(),
        "involvedObject.fieldPath" => o.field_path.as_deref(),
        "reason" => e.reason.as_deref(),
        "reportingComponent" => e.reporting_component.as_deref(),
        "source" => source,
        "type" => e.type_.as_deref(),
        "metadata.name" => e.metadata.name.as_deref(),
        "metadata.namespace" => e.metadata.namespace.as_deref(),
        _ => None,
    });
    let no_labels = BTreeMap::new();
    matches_fields
        && query
            .labels
            .matches(e.metadata.labels.as_ref().unwrap_or(&no_labels))
}

async fn history(s: &AppState, query: HistoryQuery) -> Result<Vec<crate::model::Event>, Response> {
    let store = s.store.clone();
    super::v1::blocking(move || store.history(&query))
        .await?
        .map_err(internal)
}
