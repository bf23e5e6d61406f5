//! `/api/v1/nodes`: nodes as the Kubernetes API serves them (lists with
//! selectors and pages, single nodes, as JSON or as a kubectl Table).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use k8s_openapi::List;

use super::params::{wants_table, ListParams};
use super::{bad_request, paging, table, AppState};
use crate::model::Micros;

/// The fields nodes can be selected by, as in kube-apiserver.
const NODE_FIELDS: &[&str] = &["metadata.name", "spec.unschedulable"];

pub(crate) async fn list_nodes(
    State(s): State<AppState>,
    headers: HeaderMap,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Response {
    let params = match ListParams::from_query(params) {
        Ok(p) => p,
        Err(e) => return bad_request(e),
    };
    match params.is_watch() {
        Ok(true) => return watch(s, &headers, &params, NODE_FIELDS).await,
        Ok(false) => {}
        Err(e) => return bad_request(e),
    }
    let query = match params.query(NODE_FIELDS) {
        Ok(q) => q,
        Err(e) => return bad_request(e),
    };

    // The version the view is known to show every change up to, read before
    // the view itself: the store's durable seq can be ahead of the view for
    // a moment, and a list+watch from there would miss that change.
    let version = s.view.published();
    let mut nodes = s.view.list();
    nodes.retain(|(node, _)| {
        let unschedulable = if node.unschedulable { "true" } else { "false" };
        query.fields.matches(|field| match field {
            "metadata.name" => Some(node.name.as_str()),
            "spec.unschedulable" => Some(unschedulable),
            _ => None,
        }) && query.labels.matches(&crate::kube::node_labels(node))
    });
    // Pages follow name order, as etcd keys do.
    nodes.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    let keyed = nodes.into_iter().map(|n| (n.0.name.clone(), n)).collect();
    let page = paging::page(
        keyed,
        params.limit,
        query.continue_from.as_ref(),
        version,
        query.unfiltered(),
    );

    if wants_table(&headers) {
        let table = table::node_table(&page.items, page.metadata, query.include, Micros::now());
        return Json(table).into_response();
    }
    let items = page
        .items
        .iter()
        .map(|(n, beat)| crate::kube::node(n, *beat))
        .collect();
    Json(List {
        items,
        metadata: page.metadata,
    })
    .into_response()
}

pub(crate) async fn get_node(
    State(s): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Response {
    let include = match ListParams::from_query(params).and_then(|p| p.include_object()) {
        Ok(include) => include,
        Err(e) => return bad_request(e),
    };
    let Some((node, beat)) = s.view.get(&name) else {
        return (
            StatusCode::NOT_FOUND,
            Json(crate::kube::not_found("nodes", &name)),
        )
            .into_response();
    };
    if wants_table(&headers) {
        // A single object's Table carries the object's resourceVersion.
        let metadata = ListMeta {
            resource_version: Some(node.resource_version.to_string()),
            ..ListMeta::default()
        };
        let table = table::node_table(&[(node, beat)], metadata, include, Micros::now());
        return Json(table).into_response();
    }
    Json(crate::kube::node(&node, beat)).into_response()
}

/// `?watch=true`: the same selectors and representation as the list, as a stream.
async fn watch(
    s: AppState,
    headers: &HeaderMap,
    params: &ListParams,
    fields: &'static [&'static str],
) -> Response {
    let query = match params.query(fields) {
        Ok(q) => q,
        Err(e) => return bad_request(e),
    };
    let bookmarks = match params
        .allow_watch_bookmarks
        .as_deref()
        .map(super::params::parse_bool)
    {
        None => false,
        Some(Some(b)) => b,
        Some(None) => return bad_request("allowWatchBookmarks: invalid value".into()),
    };
    let include = query.include;
    let filter_query = query.clone();
    let filter: super::watch::NodeFilter = std::sync::Arc::new(move |node: &crate::model::Node| {
        let unschedulable = if node.unschedulable { "true" } else { "false" };
        filter_query.fields.matches(|field| match field {
            "metadata.name" => Some(node.name.as_str()),
            "spec.unschedulable" => Some(unschedulable),
            _ => None,
        }) && filter_query.labels.matches(&crate::kube::node_labels(node))
    });
    // kubectl get -w asks for Tables: each event carries a one-row Table.
    let render: Option<super::watch::NodeRender> = wants_table(headers).then(|| {
        let render: super::watch::NodeRender =
            std::sync::Arc::new(move |node: &crate::model::Node| {
                let metadata = ListMeta {
                    resource_version: Some(node.resource_version.to_string()),
                    ..ListMeta::default()
                };
                let table =
                    table::node_table(&[(node.clone(), None)], metadata, include, Micros::now());
                serde_json::to_value(table).unwrap_or_default()
            });
        render
    });
    let watch = super::watch::WatchParams {
        resource_version: params.resource_version.clone(),
        timeout: params
            .timeout_seconds
            .filter(|t| *t > 0)
            .map(|t| std::time::Duration::from_secs(t as u64)),
        bookmarks,
        filter: Some(filter),
        render,
    };
    super::watch::watch_nodes(s, watch).await
}
