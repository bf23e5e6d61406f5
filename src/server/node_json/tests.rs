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
    }
}

fn items(body: &[u8]) -> Vec<Value> {
    let list: Value = serde_json::from_slice(body).expect("the list is JSON");
    list["items"].as_array().expect("items").clone()
}

#[test]
fn the_list_is_byte_for_byte_what_a_kubernetes_list_serializes_to() {
    let cache = NodeJsonCache::default();
    let nodes = vec![
        (node("a", "z1", 3), None),
        (node("b", "z2", 4), Some(Micros(9_000_000))),
    ];
    let metadata = ListMeta {
        resource_version: Some("7".into()),
        continue_: Some("token".into()),
        remaining_item_count: Some(5),
        ..ListMeta::default()
    };
    let expected = serde_json::to_vec(&List::<KubeNode> {
        items: nodes
            .iter()
            .map(|(n, beat)| crate::kube::node(n, *beat))
            .collect(),
        metadata: metadata.clone(),
    })
    .unwrap();
    // Made fresh, then again from what was kept.
    assert_eq!(cache.list(nodes.clone(), &metadata).0, expected);
    assert_eq!(cache.list(nodes, &metadata).0, expected);

    let empty = ListMeta {
        resource_version: Some("7".into()),
        ..ListMeta::default()
    };
    let expected = serde_json::to_vec(&List::<KubeNode> {
        items: vec![],
        metadata: empty.clone(),
    })
    .unwrap();
    assert_eq!(cache.list(vec![], &empty).0, expected);
}

#[test]
fn a_node_is_serialized_again_after_any_change_even_without_a_new_version() {
    let cache = NodeJsonCache::default();
    let meta = ListMeta::default();
    let nodes = vec![(node("a", "z1", 3), None), (node("b", "z1", 4), None)];
    let (_, reuse) = cache.list(nodes.clone(), &meta);
    assert_eq!(
        reuse,
        Reuse {
            reused: 0,
            serialized: 2
        }
    );
    let (_, reuse) = cache.list(nodes.clone(), &meta);
    assert_eq!(
        reuse,
        Reuse {
            reused: 2,
            serialized: 0
        }
    );

    // A label changed under the same resourceVersion: still not served stale.
    let mut relabelled = nodes.clone();
    relabelled[1].0.labels.insert("rack".into(), "r9".into());
    let (body, reuse) = cache.list(relabelled.clone(), &meta);
    assert_eq!(
        reuse,
        Reuse {
            reused: 1,
            serialized: 1
        }
    );
    assert_eq!(items(&body)[1]["metadata"]["labels"]["rack"], "r9");

    // A newer heartbeat shows in the Ready condition.
    relabelled[0].1 = Some(Micros(60_000_000));
    let (body, reuse) = cache.list(relabelled.clone(), &meta);
    assert_eq!(
        reuse,
        Reuse {
            reused: 1,
            serialized: 1
        }
    );
    assert_eq!(
        items(&body)[0]["status"]["conditions"][0]["lastHeartbeatTime"],
        "1970-01-01T00:01:00Z"
    );

    // A condition's own heartbeat (the controller's probe) too.
    relabelled[1].0.conditions[0].last_heartbeat = Micros(120_000_000);
    let (body, reuse) = cache.list(relabelled, &meta);
    assert_eq!(
        reuse,
        Reuse {
            reused: 1,
            serialized: 1
        }
    );
    assert_eq!(
        items(&body)[1]["status"]["conditions"][0]["lastHeartbeatTime"],
        "1970-01-01T00:02:00Z"
    );
}

#[test]
fn deleted_nodes_are_forgotten() {
    let cache = NodeJsonCache::default();
    let view = View::default();
    let all = vec![(node("a", "z1", 1), None), (node("b", "z1", 2), None)];
    view.publish(all.iter().map(|(n, _)| n.clone()), &[]);
    cache.list(all.clone(), &ListMeta::default());
    cache.forget_deleted(&view);
    assert_eq!(cache.len(), 2);
    // Deleted, and another node added in its place.
    view.publish([node("c", "z1", 3)], &["a".to_string()]);
    cache.forget_deleted(&view);
    assert_eq!(
        cache.len(),
        2,
        "nothing to tell yet: as many entries as nodes"
    );
    cache.list(
        vec![(node("b", "z1", 2), None), (node("c", "z1", 3), None)],
        &ListMeta::default(),
    );
    cache.forget_deleted(&view);
    assert_eq!(cache.len(), 2, "a's JSON is dropped once c is listed");
}

/// A server state over a view the test publishes to (no controller runs).
fn state(dir: &tempfile::TempDir) -> AppState {
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
    let response =
        crate::server::nodes::list_nodes(State(s.clone()), HeaderMap::new(), params).await;
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
            &serde_json::to_value(crate::kube::node(&n, beat)).unwrap()
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
