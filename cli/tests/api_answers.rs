//! What the API answers, with the real binary, where it follows
//! kube-apiserver: concurrent patches without a precondition all apply;
//! every answer says `X-Content-Type-Options: nosniff`. `/metrics` answers
//! in the format asked for, as Prometheus client libraries do.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::io::Write;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

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

/// `promtool check metrics` on `text`: its exit code and what it printed.
fn promtool_check(text: &str) -> (i32, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("promtool cannot run ({e}): install it (Debian: apt-get install prometheus)")
        });
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), said)
}

/// `/metrics` in the format `accept` asks for: its content type and text.
async fn metrics(c: &Controller, accept: Option<&str>) -> (String, String) {
    let mut request = client().get(format!("{}/metrics", c.url));
    if let Some(accept) = accept {
        request = request.header("accept", accept);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    (content_type, response.text().await.unwrap())
}

/// Prometheus client libraries answer the text format 0.0.4 unless
/// OpenMetrics is asked for (prometheus/common expfmt/encode.go,
/// `NegotiateIncludingOpenMetrics`, lines 96-131 before d2417e2, as
/// client_golang's promhttp uses it): `curl URL/metrics | promtool check
/// metrics` parses, and Prometheus' own scrape still gets OpenMetrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_answered_in_the_format_asked_for() {
    let site = one_node();
    let c = site.controller(&[]);
    registered(&c).await;
    let text_type = "text/plain; version=0.0.4; charset=utf-8";
    for accept in [Some("*/*"), None, Some("text/plain;version=0.0.4")] {
        let (content_type, text) = metrics(&c, accept).await;
        assert_eq!(content_type, text_type, "{accept:?}");
        assert!(!text.contains("# EOF"), "{accept:?}");
        let (code, said) = promtool_check(&text);
        // 0: clean; 3: read, with lint findings; 1: not read at all.
        assert!(code == 0 || code == 3, "promtool ({code}): {said}");
        // The one finding: the heartbeat age gauge's `quantile` label,
        // which promtool keeps for summaries (the dashboards query it so).
        let findings: Vec<&str> = said
            .lines()
            .filter(|l| !l.contains("nodekeeper_heartbeat_age_seconds non-summary metrics should not have \"quantile\" label"))
            .collect();
        assert!(findings.is_empty(), "promtool: {said}");
    }
    let scrape = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                  version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let (content_type, text) = metrics(&c, Some(scrape)).await;
    assert_eq!(
        content_type,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(text.contains("# TYPE nodekeeper_build info"), "{text}");
    assert!(c.stop().success());
}
