//! What the API answers, with the real binary, where it follows
//! kube-apiserver: concurrent patches without a precondition all apply;
//! every answer says `X-Content-Type-Options: nosniff`.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;

use common::*;
use serde_json::{json, Value};

/// A site in push mode of one node, `edge-1`, on this file's loopback range
/// (push mode never probes it).
fn one_node() -> TestSite<()> {
    TestSite::named(&["edge-1"], Ipv4Addr::new(127, 162, 0, 1)).start()
}

async fn registered(c: &Controller) -> Value {
    c.wait_for("/api/v1/nodes/edge-1", "edge-1 registered", |n| {
        n["kind"] == "Node"
    })
    .await
}

/// kube-apiserver applies a patch without a resourceVersion precondition
/// to the object as it is, again and again until it lands
/// (k8s.io/apiserver pkg/endpoints/handlers/patch.go:589, "applyPatch is
/// called every time GuaranteedUpdate asks for the updated object";
/// pkg/storage/etcd3/store.go:473 GuaranteedUpdate, whose loop from line
/// 509 reads the object again and retries on a conflict, lines 617-625),
/// so concurrent patches of one node all apply and none is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_patches_without_a_precondition_all_apply() {
    let site = one_node();
    let c = site.controller(&[]);
    registered(&c).await;
    const WRITERS: usize = 300;
    let patches = (0..WRITERS).map(|i| {
        let url = format!("{}/api/v1/nodes/edge-1", c.url);
        async move {
            let response = client()
                .patch(url)
                .timeout(DEADLINE)
                .header("content-type", "application/merge-patch+json")
                .body(json!({"metadata": {"labels": {format!("writer-{i}"): "done"}}}).to_string())
                .send()
                .await
                .expect("the controller answers");
            let code = response.status().as_u16();
            (code, response.text().await.unwrap())
        }
    });
    let answers = futures_util::future::join_all(patches).await;
    let refused: Vec<&(u16, String)> = answers.iter().filter(|(code, _)| *code != 200).collect();
    assert!(
        refused.is_empty(),
        "{} of {WRITERS} refused, the first: {:?}",
        refused.len(),
        refused.first()
    );
    let (_, node) = c.get("/api/v1/nodes/edge-1").await;
    let labels = node["metadata"]["labels"].as_object().unwrap();
    let written = (0..WRITERS)
        .filter(|i| labels.get(&format!("writer-{i}")) == Some(&json!("done")))
        .count();
    assert_eq!(written, WRITERS, "every patch is in the node");
    assert!(c.stop().success());
}

/// kube-apiserver tells browsers not to sniff its answers
/// (k8s.io/apiserver pkg/server/filters/content_type.go:25,
/// pkg/endpoints/handlers/responsewriters/errors.go:41 for every error,
/// pkg/server/healthz/healthz.go:323); nodekeeper says so on every answer:
/// objects, lists, watches, errors of every kind, health and metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_says_nosniff() {
    let site = one_node();
    let c = site.controller(&[]);
    registered(&c).await;
    let url = |path: &str| format!("{}{path}", c.url);
    let requests = [
        client().get(url("/api/v1/nodes")),
        client().get(url("/api/v1/nodes/edge-1")),
        client().get(url("/api/v1/nodes/nope")),
        client().get(url("/api")),
        client().get(url("/version")),
        client().get(url("/v1/history")),
        client().get(url("/metrics")),
        client().get(url("/healthz")),
        client().get(url("/no/such/path")),
        client().get(url("/api/v1/nodes?limit=lots")),
        client().delete(url("/version")),
        client()
            .patch(url("/api/v1/nodes/edge-1"))
            .header("content-type", "text/plain")
            .body("x"),
        client()
            .patch(url("/api/v1/nodes/edge-1"))
            .header("content-type", "application/merge-patch+json")
            .body(r#"{"spec": {"unschedulable": true}}"#),
        client()
            .patch(url("/api/v1/nodes/edge-1"))
            .header("content-type", "application/merge-patch+json")
            .body(vec![b' '; (1 << 20) + 1]),
    ];
    for request in requests {
        let request = request.build().unwrap();
        let what = format!("{} {}", request.method(), request.url());
        let response = client().execute(request).await.unwrap();
        assert_eq!(
            response
                .headers()
                .get("x-content-type-options")
                .map(|v| v.to_str().unwrap()),
            Some("nosniff"),
            "{what}: {}",
            response.status()
        );
    }
    // A watch, as it starts to stream.
    let watch = client()
        .get(url("/api/v1/nodes?watch=true&timeoutSeconds=1"))
        .send()
        .await
        .unwrap();
    assert_eq!(watch.status(), 200);
    assert_eq!(watch.headers()["x-content-type-options"], "nosniff");
    assert!(c.stop().success());
}
