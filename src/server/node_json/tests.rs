use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::Node as KubeNode;
use k8s_openapi::List;
use serde_json::Value;

use super::*;
use crate::controller::ControllerHandle;
use crate::model::{Condition, ConditionStatus, Resources, READY};
use crate::model::{Micros, Node};
use crate::server::{AppState, SharedState};
use crate::store::{Store, StoreOptions};
use crate::view::View;

fn node(name: &str, zone: &str, rv: u64) -> Node {
    Node {
        name: name.into(),
        uid: format!("uid-{name}"),
        created: Micros(1_000_000),
        resource_version: rv,
        source: "static".into(),
        labels: BTreeMap::from([("topology.kubernetes.io/zone".into(), zone.into())]),
        annotations: BTreeMap::new(),
        external_id: name.into(),
        provider_id: String::new(),
        capacity: Resources::default(),
        unschedulable: false,
        taints: vec![],
        addresses: vec![],
        conditions: vec![Condition {
            kind: READY.into(),
            status: ConditionStatus::True,
            last_heartbeat: Micros(2_000_000),
            last_transition: Micros(2_000_000),
            reason: "KubeletReady".into(),
            message: "ok".into(),
        }],
        node_info: Default::default(),
        reported: Default::default(),
    }
}

/// The body of a list of `range` of `encoded`, chunk by chunk.
async fn chunks(
    encoded: Arc<Encoded>,
    range: std::ops::Range<usize>,
    meta: &ListMeta,
) -> Vec<Bytes> {
    let mut body = ListBody::new(encoded, range, meta);
    let total = hyper::body::Body::size_hint(&body).exact().unwrap();
    let mut chunks = Vec::new();
    while let Some(frame) = body.frame().await {
        chunks.push(frame.unwrap().into_data().unwrap());
    }
    assert!(hyper::body::Body::is_end_stream(&body));
    assert_eq!(
        chunks.iter().map(|c| c.len() as u64).sum::<u64>(),
        total,
        "as announced"
    );
    chunks
}

fn joined(chunks: &[Bytes]) -> Vec<u8> {
    chunks.iter().flat_map(|c| c.iter().copied()).collect()
}

#[tokio::test]
async fn the_list_is_byte_for_byte_what_a_kubernetes_list_serializes_to() {
    let view = View::default();
    // Enough nodes for several chunks.
    let nodes: Vec<Node> = (0..300)
        .map(|i| node(&format!("n{i:03}"), "z1", i + 1))
        .collect();
    view.publish(nodes.clone(), &[]);
    view.beat([("n001", Micros(9_000_000))]);
    let json = NodeJson::default();
    let all = json.all(&view).await;
    let metadata = ListMeta {
        resource_version: Some("7".into()),
        continue_: Some("token".into()),
        remaining_item_count: Some(5),
        ..ListMeta::default()
    };
    let expected = |range: std::ops::Range<usize>, metadata: &ListMeta| {
        serde_json::to_vec(&List::<KubeNode> {
            items: nodes[range]
                .iter()
                .map(|n| crate::k8s::node(n, (n.name == "n001").then_some(Micros(9_000_000))))
                .collect(),
            metadata: metadata.clone(),
        })
        .unwrap()
    };
    let whole = chunks(all.clone(), 0..300, &metadata).await;
    assert!(whole.len() > 3, "{} chunks", whole.len());
    assert!(whole.iter().all(|c| c.len() <= CHUNK + 200));
    assert_eq!(joined(&whole), expected(0..300, &metadata));
    // A page of it, and nothing.
    assert_eq!(
        joined(&chunks(all.clone(), 10..12, &metadata).await),
        expected(10..12, &metadata)
    );
    let empty = ListMeta {
        resource_version: Some("7".into()),
        ..ListMeta::default()
    };
    assert_eq!(
        joined(&chunks(all, 5..5, &empty).await),
        expected(5..5, &empty)
    );
}

#[tokio::test]
async fn a_node_is_encoded_again_after_any_change_and_only_then() {
    let view = View::default();
    view.publish([node("a", "z1", 3), node("b", "z1", 4)], &[]);
    let json = NodeJson::default();
    let first = json.all(&view).await;
    let again = json.all(&view).await;
    assert!(
        Arc::ptr_eq(&first, &again),
        "nothing changed: the same snapshot"
    );
    let same =
        |a: &Encoded, b: &Encoded, i: usize| a.items[i].json.as_ptr() == b.items[i].json.as_ptr();

    // A label changed under the same resourceVersion: still not served stale.
    let mut relabelled = node("b", "z1", 4);
    relabelled.labels.insert("rack".into(), "r9".into());
    view.publish([relabelled], &[]);
    let next = json.all(&view).await;
    assert!(same(&first, &next, 0) && !same(&first, &next, 1));
    let item: Value = serde_json::from_slice(&next.items[1].json).unwrap();
    assert_eq!(item["metadata"]["labels"]["rack"], "r9");

    // A newer heartbeat shows in the Ready condition.
    view.beat([("a", Micros(60_000_000))]);
    let beat = json.all(&view).await;
    assert!(!same(&next, &beat, 0) && same(&next, &beat, 1));
    let item: Value = serde_json::from_slice(&beat.items[0].json).unwrap();
    assert_eq!(
        item["status"]["conditions"][0]["lastHeartbeatTime"],
        "1970-01-01T00:01:00Z"
    );

    // A condition's own heartbeat (a pushed status) too.
    let mut pushed = node("b", "z1", 4);
    pushed.labels.insert("rack".into(), "r9".into());
    pushed.conditions[0].last_heartbeat = Micros(120_000_000);
    view.publish_heartbeats(&pushed);
    let pushed_list = json.all(&view).await;
    assert!(same(&beat, &pushed_list, 0) && !same(&beat, &pushed_list, 1));
    let item: Value = serde_json::from_slice(&pushed_list.items[1].json).unwrap();
    assert_eq!(
        item["status"]["conditions"][0]["lastHeartbeatTime"],
        "1970-01-01T00:02:00Z"
    );

    // A single node's JSON is the kept one.
    let one = json.one(view.shown_node("a").unwrap()).await;
    assert_eq!(one.as_ptr(), pushed_list.items[0].json.as_ptr());
}

#[tokio::test]
async fn deleted_nodes_are_forgotten() {
    let json = NodeJson::default();
    let view = View::default();
    view.publish([node("a", "z1", 1), node("b", "z1", 2)], &[]);
    json.all(&view).await;
    assert_eq!(json.len(), 2);
    // Deleted, and another node added in its place.
    view.publish([node("c", "z1", 3)], &["a".to_string()]);
    json.all(&view).await;
    assert_eq!(
        json.len(),
        2,
        "a's JSON is dropped once every node is listed"
    );
}

/// A server state over a view the test publishes to (no controller runs).
pub(crate) fn state(dir: &tempfile::TempDir) -> AppState {
    let store = Store::open(&dir.path().join("db"), &StoreOptions::default()).unwrap();
    let (controller, _) = ControllerHandle::channel();
    AppState::new(SharedState {
        view: Arc::new(View::default()),
        store: Arc::new(store),
        metrics: Arc::new(crate::metrics::Metrics::new()),
        controller,
        shutdown: Default::default(),
        mirror: None,
        health: crate::readiness::Health::new(),
        node_json: Default::default(),
    })
}

/// `GET /api/v1/nodes?{query}` through the handler.
async fn get(s: &AppState, query: &str) -> Value {
    let uri: Uri = format!("/api/v1/nodes?{query}").parse().unwrap();
    let params = Query::try_from_uri(&uri);
    let response = crate::server::nodes::list_nodes(State(s.clone()), HeaderMap::new(), params)
        .await
        .unwrap_or_else(|refused| refused);
    assert_eq!(response.status(), StatusCode::OK, "{query}");
    let body = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&body).unwrap()
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn the_list_follows_every_published_change() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(&dir);
    s.view
        .publish((0..5).map(|i| node(&format!("n{i}"), "z1", i + 1)), &[]);
    s.view.advance(5);
    let first = get(&s, "").await;
    assert_eq!(names(&first), ["n0", "n1", "n2", "n3", "n4"]);
    assert_eq!(first["metadata"]["resourceVersion"], "5");
    assert_eq!(get(&s, "").await, first, "a list again is the same list");

    // Cordoned; then deleted; then a new node; then a heartbeat.
    let mut cordoned = node("n1", "z1", 6);
    cordoned.unschedulable = true;
    s.view.publish([cordoned], &[]);
    s.view.advance(6);
    let list = get(&s, "").await;
    assert_eq!(list["items"][1]["spec"]["unschedulable"], true);
    assert_eq!(list["items"][1]["metadata"]["resourceVersion"], "6");
    assert_eq!(list["metadata"]["resourceVersion"], "6");

    s.view.publish([node("n9", "z2", 7)], &["n3".to_string()]);
    s.view.advance(7);
    let list = get(&s, "").await;
    assert_eq!(names(&list), ["n0", "n1", "n2", "n4", "n9"]);
    assert_eq!(s.node_json.len(), 5, "the deleted node's JSON is dropped");

    s.view.beat([("n0", Micros(300_000_000))]);
    let list = get(&s, "").await;
    assert_eq!(
        list["items"][0]["status"]["conditions"][0]["lastHeartbeatTime"],
        "1970-01-01T00:05:00Z"
    );
    // Every item is what a single get of the node says.
    for item in list["items"].as_array().unwrap() {
        let name = item["metadata"]["name"].as_str().unwrap();
        let (n, beat) = s.view.get(name).unwrap();
        assert_eq!(
            item,
            &serde_json::to_value(crate::k8s::node(&n, beat)).unwrap()
        );
    }
}

#[tokio::test]
async fn selectors_and_pages_apply_with_every_node_already_kept() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(&dir);
    s.view.publish(
        (0..7).map(|i| {
            let mut n = node(
                &format!("n{i}"),
                if i % 2 == 0 { "even" } else { "odd" },
                i + 1,
            );
            n.unschedulable = i == 3;
            n
        }),
        &[],
    );
    s.view.advance(7);
    let all = get(&s, "").await;
    assert_eq!(s.node_json.len(), 7);

    let odd = get(&s, "labelSelector=topology.kubernetes.io%2Fzone%3Dodd").await;
    assert_eq!(names(&odd), ["n1", "n3", "n5"]);
    let cordoned = get(&s, "fieldSelector=spec.unschedulable%3Dtrue").await;
    assert_eq!(names(&cordoned), ["n3"]);
    let one = get(&s, "fieldSelector=metadata.name%3Dn6").await;
    assert_eq!(one["items"][0], all["items"][6]);

    // Pages of 3 with continue tokens: together, the whole list.
    let mut paged = Vec::new();
    let mut query = "limit=3".to_string();
    for round in 0.. {
        assert!(round < 5, "the pages end");
        let page = get(&s, &query).await;
        assert_eq!(page["metadata"]["resourceVersion"], "7");
        paged.extend(page["items"].as_array().unwrap().iter().cloned());
        match page["metadata"]["continue"].as_str() {
            Some(token) => {
                let remaining = page["metadata"]["remainingItemCount"].as_i64().unwrap();
                assert_eq!(remaining as usize, 7 - paged.len());
                query = format!("limit=3&continue={token}");
            }
            None => break,
        }
    }
    assert_eq!(&paged, all["items"].as_array().unwrap());

    // A selector and a page at once.
    let page = get(
        &s,
        "labelSelector=topology.kubernetes.io%2Fzone%3Deven&limit=2",
    )
    .await;
    assert_eq!(names(&page), ["n0", "n2"]);
    assert!(page["metadata"]["continue"].is_string());
    assert!(page["metadata"].get("remainingItemCount").is_none());
}
