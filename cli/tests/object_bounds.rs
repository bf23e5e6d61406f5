//! What one request may build, with the real binary: a JSON patch's copies
//! and operations are bounded as kube-apiserver bounds them, so a small
//! patch cannot take the controller's memory; and a node is bounded as a
//! whole (960 KiB as its record's JSON), whichever way it is written:
//! patches, PUT, a kubelet's status or registration, `db import`. A refused
//! write stores nothing; a node stored past the bound before there was one
//! still loads, and may shrink. An import leaves room for the seqs after it.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;
use std::path::Path;

use common::*;
use nodekeeper::model::Micros;
use nodekeeper::store::{Batch, Store, StoreOptions};
use serde_json::{json, Map, Value};

/// A site in push mode of one node, `edge-1`, on this file's loopback range
/// (push mode never probes it).
fn one_node() -> TestSite<()> {
    TestSite::named(&["edge-1"], Ipv4Addr::new(127, 161, 0, 1)).start()
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
    let before = c.wait_registered("edge-1").await;
    let rss_before = peak_rss_mib(&c);

    let body = doubling_patch();
    assert!(
        body.len() < 3000,
        "the patch is small: {} bytes",
        body.len()
    );
    let (code, status) = c
        .call("PATCH", "/api/v1/nodes/edge-1")
        .body("application/json-patch+json", body)
        .send()
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
    let (code, status) = c
        .call("PATCH", "/api/v1/nodes/edge-1")
        .body(
            "application/json-patch+json",
            serde_json::to_string(&many).unwrap(),
        )
        .send()
        .await;
    assert_eq!(code, 413, "{status}");
    assert_eq!(status["reason"], "RequestEntityTooLarge", "{status}");
    assert_eq!(
        status["message"],
        "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001"
    );
    assert!(c.stop().success());
}

/// Labels `from..to`, 40 bytes each in the node's JSON (`"k":"v",`), or
/// `null` for each (their removal by a merge patch).
fn labels(from: usize, to: usize, remove: bool) -> Value {
    let labels: Map<String, Value> = (from..to)
        .map(|i| {
            let value = if remove {
                Value::Null
            } else {
                json!(format!("value-{i:06}"))
            };
            (format!("example.com/key-{i:06}"), value)
        })
        .collect();
    json!({"metadata": {"labels": labels}})
}

async fn label_patch(c: &Controller, from: usize, to: usize, remove: bool) -> (u16, Value) {
    let body = labels(from, to, remove).to_string();
    assert!(
        body.len() < 1 << 20,
        "within the body limit: {}",
        body.len()
    );
    let (code, answer) = c
        .call("PATCH", "/api/v1/nodes/edge-1")
        .body("application/merge-patch+json", body)
        .send()
        .await;
    assert!(answer.is_object(), "not a JSON answer: {}", short(&answer));
    (code, answer)
}

/// The start of an answer, for a failure's message (a node here is a megabyte).
fn short(answer: &Value) -> String {
    answer.to_string().chars().take(400).collect()
}

fn too_long(code: u16, status: &Value) {
    let shown = short(status);
    assert_eq!(code, 422, "{shown}");
    assert_eq!(status["reason"], "Invalid", "{shown}");
    assert_eq!(
        status["details"]["causes"][0]["reason"], "FieldValueTooLong",
        "{shown}"
    );
    let message = status["message"].as_str().unwrap();
    assert!(
        message.starts_with("Node \"edge-1\" is invalid: Too long: the node would take ")
            && message
                .contains("more than the 983040 a node may hold; remove labels or annotations"),
        "{message}"
    );
}

async fn operator_changes(c: &Controller) -> usize {
    let (_, history) = c.get("/v1/history?node=edge-1").await;
    history
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "OperatorChanged")
        .count()
}

/// A node cannot grow past its bound across patches, nor by its kubelet's
/// status; every node can be sent back whole (`PUT`); a refused write
/// leaves the node and its history as they were. kube-apiserver keeps
/// every object within etcd's request limit (1.5 MiB by default) and
/// answers a write past it `500 etcdserver: request is too large`
/// (apiserver pkg/endpoints/handlers/rest.go:457-471 `isTooLargeError`,
/// answered through responsewriters/status.go:60-80 as an error that is not
/// a Status; kubernetes/kubernetes#112152 calls that a bug); nodekeeper
/// answers a 422 naming the size instead, as kube-apiserver does for a
/// ConfigMap past its 1 MiB (`field.TooLong(field.NewPath(""), ...)`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cannot_grow_past_its_bound_by_any_write() {
    let site = one_node();
    let c = site.controller(&[]);
    c.wait_registered("edge-1").await;

    let (code, node) = label_patch(&c, 0, 20_000, false).await;
    assert_eq!(code, 200, "{}", short(&node));
    let (code, status) = label_patch(&c, 20_000, 25_000, false).await;
    too_long(code, &status);
    let (_, after) = c.get("/api/v1/nodes/edge-1").await;
    assert_eq!(
        after["metadata"]["resourceVersion"], node["metadata"]["resourceVersion"],
        "a refused patch stores nothing"
    );
    assert_eq!(operator_changes(&c).await, 1);
    // Close to the bound, then a kubelet's status that would pass it.
    let (code, node) = label_patch(&c, 20_000, 23_500, false).await;
    assert_eq!(code, 200, "{}", short(&node));
    let big = "m".repeat(32 * 1024);
    let status = json!({"status": {"conditions": [
        {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory", "message": big},
        {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure", "message": big},
    ]}});
    let (code, refused) = c
        .call("PATCH", "/api/v1/nodes/edge-1/status")
        .body("application/strategic-merge-patch+json", status.to_string())
        .send()
        .await;
    too_long(code, &refused);

    // The node as the API shows it, at its largest, goes back whole.
    let (_, whole) = c.get("/api/v1/nodes/edge-1").await;
    assert_eq!(
        whole["metadata"]["labels"].as_object().unwrap().len(),
        23_502
    );
    let response = client()
        .put(format!("{}/api/v1/nodes/edge-1", c.url))
        .json(&whole)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    // And it shrinks.
    let (code, node) = label_patch(&c, 0, 20_000, true).await;
    assert_eq!(code, 200, "{}", short(&node));
    assert_eq!(node["metadata"]["labels"].as_object().unwrap().len(), 3_502);
    assert_eq!(operator_changes(&c).await, 3);
    assert!(c.stop().success());
}

/// A kubelet's registration (`POST /api/v1/nodes`) is bounded too, first
/// by the labels a kubelet may set (128, `src/server/node_writes.rs`),
/// which keeps it far within a node's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_cannot_register_a_node_past_its_bound() {
    let site = TestSite::unlisted().start();
    let c = site.controller_with(&["--allow-node-registration"]);
    let mut body = labels(0, 25_000, false);
    body["metadata"]["name"] = json!("edge-1");
    body["apiVersion"] = json!("v1");
    body["kind"] = json!("Node");
    let (code, status) = c.call("POST", "/api/v1/nodes").json(&body).send().await;
    let shown = short(&status);
    assert_eq!(code, 422, "{shown}");
    let cause = &status["details"]["causes"][0];
    assert_eq!(
        (&cause["field"], &cause["reason"]),
        (&json!("metadata.labels"), &json!("FieldValueTooMany")),
        "{shown}"
    );
    assert!(
        cause["message"]
            .as_str()
            .unwrap()
            .starts_with("Too many: 25000: must have at most 128 items"),
        "{shown}"
    );
    let (code, _) = c.get("/api/v1/nodes/edge-1").await;
    assert_eq!(code, 404, "a refused registration stores nothing");
    assert!(c.stop().success());
}

/// The `{"node": ...}` line of an export, changed by `change`.
fn with_node_changed(export: &str, change: impl Fn(&mut Value)) -> String {
    export
        .lines()
        .map(|line| {
            let mut v: Value = serde_json::from_str(line).unwrap();
            if v.get("node").is_some() {
                change(&mut v["node"]);
            }
            v.to_string() + "\n"
        })
        .collect()
}

/// `db import` takes no node a write through the API could not make, and
/// says which and why; the store it was to fill is left empty, and takes
/// the export once it is fixed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_refuses_a_node_out_of_bounds_and_names_it() {
    let site = one_node();
    let c = site.controller(&[]);
    c.wait_registered("edge-1").await;
    assert!(c.stop().success());
    let export = cli_ok(&site.db, &["db", "export"]);
    let copy = site.path().join("copy");
    let try_import = |text: String| {
        let file = site.path().join("export.jsonl");
        std::fs::write(&file, text).unwrap();
        cli(&copy, &["db", "import", "--input", file.to_str().unwrap()])
    };

    let oversized = with_node_changed(&export, |node| {
        node["labels"] = labels(0, 25_000, false)["metadata"]["labels"].clone();
    });
    let (code, _, err) = try_import(oversized);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(
            "import failed at line 3: Node \"edge-1\" is invalid: Too long: the node would take"
        ) && err.contains("and export it again")
            && err.contains("the store was left empty"),
        "{err}"
    );
    let bad_label = with_node_changed(&export, |node| {
        node["labels"]["not a key"] = json!("x");
    });
    let (code, _, err) = try_import(bad_label);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("Node \"edge-1\" is invalid: metadata.labels: Invalid value: \"not a key\""),
        "{err}"
    );
    let (code, _, err) = try_import(export);
    assert_eq!(code, 0, "the export as made imports: {err}");
}

/// Waits for a stopped controller's store to open (sled lets go of its lock
/// shortly after the process ends).
fn open_store(db: &Path) -> Store {
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        match Store::open(db, &StoreOptions::default()) {
            Err(nodekeeper::store::StoreError::Locked { .. })
                if std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            other => return other.unwrap(),
        }
    }
}

/// A node that an older build let grow past the bound loads and is served
/// as it is (nothing of it is dropped); it may shrink, but not grow, until
/// it is back under the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_stored_past_its_bound_still_loads_and_may_shrink() {
    let site = one_node();
    let c = site.controller(&[]);
    c.wait_registered("edge-1").await;
    assert!(c.stop().success());
    {
        // What an older build wrote: 30,000 labels, 1.2 MB.
        let store = open_store(&site.db);
        let mut node = store.node("edge-1").unwrap().unwrap();
        node.labels.extend(
            (0..30_000).map(|i| (format!("example.com/key-{i:06}"), format!("value-{i:06}"))),
        );
        assert!(nodekeeper::validation::node_bytes(&node) > 1_200_000);
        let mut batch = Batch::new(Micros::now());
        batch.record(node, []);
        store.write(batch).unwrap();
        store.flush_blocking().unwrap();
    }
    let c = site.controller(&[]);
    let (code, node) = c.get("/api/v1/nodes/edge-1").await;
    assert_eq!(code, 200, "{}", short(&node));
    assert_eq!(
        node["metadata"]["labels"].as_object().unwrap().len(),
        30_002
    );
    let (code, status) = label_patch(&c, 30_000, 30_001, false).await;
    too_long(code, &status);
    let (code, node) = label_patch(&c, 0, 10_000, true).await;
    assert_eq!(code, 200, "{}", short(&node));
    let (code, node) = label_patch(&c, 0, 20_000, true).await;
    assert_eq!(code, 200, "{}", short(&node));
    let (code, node) = label_patch(&c, 30_000, 30_001, false).await;
    assert_eq!(
        code,
        200,
        "back under the bound, it grows again: {}",
        short(&node)
    );
    assert!(c.stop().success());
}

/// An export that ends at seq 2^64-1 left a store whose next write wrapped
/// around onto seq 0 and event 1: it is refused, and the store it was to
/// fill is left empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_that_leaves_no_seq_to_write_is_refused() {
    let site = one_node();
    let c = site.controller(&[]);
    c.wait_registered("edge-1").await;
    assert!(c.stop().success());
    let export = cli_ok(&site.db, &["db", "export"]);
    let last: String = export
        .lines()
        .map(|line| {
            let mut v: Value = serde_json::from_str(line).unwrap();
            if v.get("format").is_some() {
                v["lastSeq"] = json!(u64::MAX);
            }
            v.to_string() + "\n"
        })
        .collect();
    let file = site.path().join("export.jsonl");
    std::fs::write(&file, last).unwrap();
    let copy = site.path().join("copy");
    let (code, _, err) = cli(&copy, &["db", "import", "--input", file.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("import failed at line 1: seq 18446744073709551615 is past 9007199254740991, the last seq a store can write")
            && err.contains("the store was left empty"),
        "{err}"
    );
    let (code, out, err) = cli(&copy, &["history", "-o", "json"]);
    assert_eq!((code, out.trim()), (0, "[]"), "{err}");
}
