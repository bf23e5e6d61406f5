//! What the API answers, with the real binary, where it follows
//! kube-apiserver: concurrent patches without a precondition all apply;
//! every answer says `X-Content-Type-Options: nosniff`. `/metrics` answers
//! in the format asked for, as Prometheus client libraries do, with
//! kube-state-metrics' node series unless `--resources` leaves nodes out. A probed
//! node has the Lease its probes renew, as `kubectl describe node` reads it.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::io::Write;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

use common::*;
use serde_json::json;

/// A site in push mode of one node, `edge-1`, on this file's loopback range
/// (push mode never probes it).
fn one_node() -> TestSite<()> {
    TestSite::named(&["edge-1"], Ipv4Addr::new(127, 162, 0, 1)).start()
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
    c.wait_registered("edge-1").await;
    const WRITERS: usize = 300;
    // One client, built before any writer connects: a client built inside
    // each writer held every connection made before it without its request
    // while the rest were built, and on a busy machine past the
    // controller's 10 s for a new connection's headers.
    let http = client();
    let patches = (0..WRITERS).map(|i| {
        let request = http
            .patch(format!("{}/api/v1/nodes/edge-1", c.url))
            .timeout(DEADLINE)
            .header("content-type", "application/merge-patch+json")
            .body(json!({"metadata": {"labels": {format!("writer-{i}"): "done"}}}).to_string());
        async move {
            let response = request.send().await.expect("the controller answers");
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
    c.wait_registered("edge-1").await;
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
    c.wait_registered("edge-1").await;
    let text_type = "text/plain; version=0.0.4; charset=utf-8";
    for accept in [Some("*/*"), None, Some("text/plain;version=0.0.4")] {
        let (content_type, text) = metrics(&c, accept).await;
        assert_eq!(content_type, text_type, "{accept:?}");
        assert!(!text.contains("# EOF"), "{accept:?}");
        // kube-state-metrics' node series come along, checked by promtool too.
        assert!(
            text.contains("kube_node_status_condition{node=\"")
                && text.contains("# TYPE kube_node_info gauge"),
            "{text}"
        );
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
    assert_eq!(text.matches("# EOF").count(), 1, "{text}");
    assert!(
        text.contains("kube_node_spec_unschedulable{node=\""),
        "{text}"
    );
    assert!(c.stop().success());
}

/// kube-state-metrics' `--resources` selects the resources whose series it
/// makes (kubernetes/kube-state-metrics at c92fe0c5, pkg/options/options.go:188;
/// none given: every resource, pkg/app/server.go:215-216). A list without
/// `nodes`, here from the config file's `resources` key, serves no
/// `kube_node_*` series and keeps nodekeeper's own; without it they are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_without_nodes_serve_no_node_series() {
    let site = one_node();
    let config = site.path().join("resources.yaml");
    std::fs::write(&config, "resources: [pods, leases]\n").unwrap();
    let c = site.controller_with(&["--config", config.to_str().unwrap()]);
    c.wait_registered("edge-1").await;
    for accept in [None, Some("application/openmetrics-text;version=1.0.0")] {
        let (_, text) = metrics(&c, accept).await;
        assert!(!text.contains("kube_node_"), "{accept:?}: {text}");
        assert!(
            text.contains("nodekeeper_build_info{"),
            "{accept:?}: {text}"
        );
    }
    assert!(c.stop().success());

    let c = site.controller(&[]);
    c.wait_registered("edge-1").await;
    let (_, text) = metrics(&c, None).await;
    assert!(text.contains("kube_node_info{node=\"edge-1\""), "{text}");
    assert!(c.stop().success());
}

/// `kubectl describe node` reads the node's Lease
/// (kubernetes/kubectl pkg/describe/describe.go:3513-3516, "Failed to get
/// lease" when it cannot; describeNodeLease, line 3649). kube-apiserver holds
/// one for every node whose kubelet is alive (kubelet renews it: holder the
/// node, 40 s, k8s.io/component-helpers apimachinery/lease/controller.go); a
/// probed node's kubelet keeps none here, so the one its probe answers make
/// is served. A kubelet that then writes it back keeps its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probed_node_is_described_with_the_lease_its_answers_renew() {
    let site = TestSite::start(1, Ipv4Addr::new(127, 162, 1, 1)).await;
    let c = site.controller(&[]);
    let name = site.name(0);
    c.wait_ready(&name, "True").await;

    let described = Kubectl::new(&c.url, site.path())
        .ok(&["describe", "node", &name])
        .await;
    assert!(!described.contains("Failed to get lease"), "{described}");
    let lease: Vec<&str> = described
        .split("Lease:")
        .nth(1)
        .unwrap_or_else(|| panic!("no Lease section: {described}"))
        .lines()
        .take(4)
        .collect();
    assert!(
        lease[1]
            .split_whitespace()
            .eq(["HolderIdentity:", name.as_str()]),
        "{lease:?}"
    );
    assert!(lease[3].trim().starts_with("RenewTime:"), "{lease:?}");
    assert!(!lease[3].contains("<unset>"), "{lease:?}");

    // A kubelet that starts keeping a Lease reads this one and writes it back.
    let path = format!("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}");
    let (code, mut served) = c.get(&path).await;
    assert_eq!(code, 200, "{served}");
    assert_eq!(served["spec"]["leaseDurationSeconds"], 40);
    served["spec"]["renewTime"] = json!("2030-01-01T00:00:00.000000Z");
    let (code, own) = c.call("PUT", &path).json(&served).send().await;
    assert_eq!(code, 200, "{own}");
    let (_, now) = c.get(&path).await;
    assert_eq!(
        now["spec"]["renewTime"], "2030-01-01T00:00:00.000000Z",
        "{now}"
    );
    assert!(
        now["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty()),
        "{now}"
    );
    assert_eq!(now["metadata"]["resourceVersion"], "1", "{now}");
    assert!(c.stop().success());
    site.stop().await;
}
