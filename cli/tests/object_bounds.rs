//! What one request may build, with the real binary: a JSON patch's copies
//! and operations are bounded as kube-apiserver bounds them, so a small
//! patch cannot take the controller's memory; a refused patch stores
//! nothing and the API keeps answering.
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
    TestSite::named(&["edge-1"], Ipv4Addr::new(127, 161, 0, 1)).start()
}

async fn registered(c: &Controller) -> Value {
    c.wait_for("/api/v1/nodes/edge-1", "edge-1 registered", |n| {
        n["kind"] == "Node"
    })
    .await
}

/// A PATCH of `body` sent as `content_type`: its status code and body.
async fn patch(c: &Controller, path: &str, content_type: &str, body: String) -> (u16, Value) {
    let response = client()
        .patch(format!("{}{path}", c.url))
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .expect("the controller answers");
    let code = response.status().as_u16();
    (code, response.json().await.expect("a JSON answer"))
}

/// The most memory the controller has held, from the kernel's account of it.
fn peak_rss_mib(c: &Controller) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", c.child.id())).unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status");
    kib / 1024.0
}

/// The report's patch: one value of 1,000 bytes, then 23 copies, each of
/// the value with every copy before it (2^23 times the value: 8 GB).
fn doubling_patch() -> String {
    let mut ops =
        vec![json!({"op": "add", "path": "/metadata/x", "value": {"s": "y".repeat(1000)}})];
    ops.extend((0..23).map(
        |i| json!({"op": "copy", "from": "/metadata/x", "path": format!("/metadata/x/c{i}")}),
    ));
    serde_json::to_string(&ops).unwrap()
}

/// kube-apiserver bounds what a JSON patch's copies add to its request body
/// limit (k8s.io/apiserver pkg/server/config.go:464 `JSONPatchMaxCopyBytes`,
/// armed at config.go:889-899) and answers a patch that passes it with a 422
/// (pkg/endpoints/handlers/patch.go:423-425); more than 10,000 operations
/// are a 413 (patch.go:65 `maxJSONPatchOperations`, patch.go:418-422).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_patch_that_doubles_a_value_is_refused_before_it_grows() {
    let site = one_node();
    let c = site.controller(&[]);
    let before = registered(&c).await;
    let rss_before = peak_rss_mib(&c);

    let body = doubling_patch();
    assert!(
        body.len() < 3000,
        "the patch is small: {} bytes",
        body.len()
    );
    let (code, status) = patch(
        &c,
        "/api/v1/nodes/edge-1",
        "application/json-patch+json",
        body,
    )
    .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["reason"], "Invalid", "{status}");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains("JSON patch operation 11: copy from /metadata/x to /metadata/x/c10")
            && message.contains("more than the 1048576 one patch may copy"),
        "the refusal names the copy and the bound: {message}"
    );
    // Nothing was stored, and the controller held no more than a few copies' worth.
    let (_, after) = c.get("/api/v1/nodes/edge-1").await;
    assert_eq!(
        after["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"],
        "{after}"
    );
    let grown = peak_rss_mib(&c) - rss_before;
    assert!(grown < 64.0, "the patch took {grown:.1} MiB");
    assert_eq!(c.text("/healthz").await, "ok");

    // More operations than kube-apiserver takes: a 413 in its words.
    let many = vec![json!({"op": "test", "path": "/spec", "value": {}}); 10_001];
    let (code, status) = patch(
        &c,
        "/api/v1/nodes/edge-1",
        "application/json-patch+json",
        serde_json::to_string(&many).unwrap(),
    )
    .await;
    assert_eq!(code, 413, "{status}");
    assert_eq!(status["reason"], "RequestEntityTooLarge", "{status}");
    assert_eq!(
        status["message"],
        "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001"
    );
    assert!(c.stop().success());
}
