//! What nodes push is bounded and cannot lie about others: made-up
//! condition types beyond a small number, oversized reasons, messages and
//! labels are refused with a 422 naming the field and write nothing; a
//! patch that is not JSON where only the merge reads it is refused with a
//! 400 and writes nothing; an empty patch changes nothing; and a node's
//! token cannot move its node's address onto another node's kubelet.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;

use common::*;
use nodekeeper_sim::KubeletState;
use serde_json::{json, Value};

fn conditions(types: impl IntoIterator<Item = String>) -> Value {
    let list: Vec<Value> = types
        .into_iter()
        .map(|t| json!({"type": t, "status": "False", "reason": "NoProblem", "message": "fine"}))
        .collect();
    json!({"status": {"conditions": list}})
}

fn causes(status: &Value) -> Vec<String> {
    status["details"]["causes"]
        .as_array()
        .unwrap_or_else(|| panic!("no causes: {status}"))
        .iter()
        .map(|c| c["field"].as_str().unwrap().to_string())
        .collect()
}

/// The newest seq in the store, and the node's condition types.
async fn state(c: &Controller, node: &str) -> (u64, Vec<String>) {
    let (_, store) = c.get("/v1/store").await;
    let (_, n) = c.get(&format!("/api/v1/nodes/{node}")).await;
    let types = n["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap().to_string())
        .collect();
    (store["lastSeq"].as_u64().unwrap(), types)
}

/// Waits until the first monitor pass has tainted both never-posting nodes:
/// from then on only the test's pushes write.
async fn settled(c: &Controller) {
    for node in ["edge-1", "edge-2"] {
        c.wait_for(&format!("/api/v1/nodes/{node}"), "the first taint", |n| {
            !n["spec"]["taints"].is_null()
        })
        .await;
    }
}

/// A site in push mode of `edge-1` and `edge-2` on this file's loopback
/// range, with grace periods long enough that nothing but these pushes writes.
fn two_nodes() -> TestSite<()> {
    TestSite::named(&["edge-1", "edge-2"], Ipv4Addr::new(127, 83, 10, 1))
        .grace("1h")
        .flag("--node-startup-grace-period", "1h")
        .start()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn made_up_conditions_beyond_the_bound_are_refused_and_write_nothing() {
    let site = two_nodes();
    let c = site.controller_with(&["--allow-node-registration"]);
    settled(&c).await;
    let (seq, types) = state(&c, "edge-1").await;

    // 4,000 made-up types in one patch: one 422, nothing written.
    let (code, s) = c
        .status_patch("edge-1", &conditions((0..4000).map(|i| format!("Made{i}"))))
        .send()
        .await;
    // On failure, the message only: the answer may be a node with 4,000 conditions.
    assert_eq!(
        (code, s["reason"].as_str()),
        (422, Some("Invalid")),
        "{}",
        s["message"]
    );
    assert_eq!(causes(&s), ["status.conditions"]);
    assert!(s["message"].as_str().unwrap().contains("at most 8"), "{s}");
    // The same as a PUT of the whole status.
    let mut put = conditions((0..4000).map(|i| format!("Made{i}")));
    put["metadata"] = json!({"name": "edge-1"});
    let (code, _) = c
        .call("PUT", "/api/v1/nodes/edge-1/status")
        .json(&put)
        .send()
        .await;
    assert_eq!(code, 422);
    assert_eq!(state(&c, "edge-1").await, (seq, types.clone()));

    // The known ones plus eight others (node-problem-detector's handful) are fine.
    let npd: Vec<String> = (0..8).map(|i| format!("ProblemDetector{i}")).collect();
    let known = [
        "MemoryPressure",
        "DiskPressure",
        "PIDPressure",
        "NetworkUnavailable",
    ]
    .map(String::from);
    let (code, s) = c
        .status_patch(
            "edge-1",
            &conditions(known.iter().cloned().chain(npd.iter().cloned())),
        )
        .send()
        .await;
    assert_eq!(code, 200, "{s}");
    let (_, types) = state(&c, "edge-1").await;
    assert_eq!(types.len(), 1 + 4 + 8, "{types:?}");
    // A ninth other type, alone or with the eight: refused; the eight update fine.
    let (code, s) = c
        .status_patch("edge-1", &conditions(["Ninth".to_string()]))
        .send()
        .await;
    assert_eq!(code, 422, "{s}");
    assert!(s["message"].as_str().unwrap().contains("\"Ninth\""), "{s}");
    let (code, _) = c
        .status_patch("edge-1", &conditions(npd.iter().cloned()))
        .send()
        .await;
    assert_eq!(code, 200);
    // The bound is per node: edge-2 has its own eight.
    let (code, _) = c
        .status_patch("edge-2", &conditions(["Ninth".to_string()]))
        .send()
        .await;
    assert_eq!(code, 200);

    // Oversized or malformed fields, each named; nothing written.
    let (seq, types) = state(&c, "edge-1").await;
    let body = json!({"status": {"conditions": [
        {"type": "Ready", "status": "True", "reason": "not CamelCase", "message": "ok"},
        {"type": "MemoryPressure", "status": "False", "reason": "R".repeat(1025)},
        {"type": "DiskPressure", "status": "False", "message": "m".repeat(32 * 1024 + 1)},
        {"type": "bad type!", "status": "False"},
        {"type": "PIDPressure", "status": "Perhaps"}
    ]}});
    let (code, s) = c.status_patch("edge-1", &body).send().await;
    assert_eq!(code, 422, "{s}");
    assert_eq!(
        causes(&s),
        [
            // Positions in the patched status: the node's conditions, then the new one.
            "status.conditions[0].reason",
            "status.conditions[1].reason",
            "status.conditions[2].message",
            "status.conditions[3].status",
            "status.conditions[13].type"
        ]
    );
    let (code, s) = c
        .status_patch(
            "edge-1",
            &json!({"status": {"nodeInfo": {"osImage": "x".repeat(5000)}}}),
        )
        .send()
        .await;
    assert_eq!(
        (code, causes(&s)),
        (422, vec!["status.nodeInfo.osImage".to_string()])
    );
    assert_eq!(state(&c, "edge-1").await, (seq, types));

    // Registration: labels as Kubernetes validates them.
    let register = json!({"metadata": {"name": "newcomer", "labels": {"ok": "x".repeat(64)}}});
    let (code, s) = c.call("POST", "/api/v1/nodes").json(&register).send().await;
    assert_eq!(
        (code, causes(&s)),
        (422, vec!["metadata.labels[ok]".to_string()]),
        "{s}"
    );
    let (code, _) = c.get("/api/v1/nodes/newcomer").await;
    assert_eq!(code, 404);
    assert!(c.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_patch_changes_nothing() {
    let site = two_nodes();
    let c = site.controller(&[]);
    settled(&c).await;
    async fn record(c: &Controller) -> Value {
        c.get("/v1/nodes/edge-1").await.1
    }
    let before = record(&c).await;
    assert_eq!(
        before["node"]["nodeInfo"]["operatingSystem"], "",
        "{before}"
    );
    let (seq, _) = state(&c, "edge-1").await;
    for content_type in [
        "application/strategic-merge-patch+json",
        "application/merge-patch+json",
    ] {
        let (code, n) = c
            .call("PATCH", "/api/v1/nodes/edge-1/status")
            .body(content_type, "{}")
            .send()
            .await;
        assert_eq!(code, 200, "{n}");
    }
    let after = record(&c).await;
    assert_eq!(after["node"], before["node"], "the record is what it was");
    assert_eq!(state(&c, "edge-1").await.0, seq);
    // A patch that sets one nodeInfo field stores that field, not the display defaults.
    let (code, _) = c
        .status_patch(
            "edge-1",
            &json!({"status": {"nodeInfo": {"kubeletVersion": "v1.32.4"}}}),
        )
        .send()
        .await;
    assert_eq!(code, 200);
    let after = record(&c).await;
    assert_eq!(after["node"]["nodeInfo"]["kubeletVersion"], "v1.32.4");
    assert_eq!(after["node"]["nodeInfo"]["operatingSystem"], "", "{after}");
    assert!(c.stop().success());
}

/// A kubelet's patch whose `$setElementOrder/conditions` is not JSON the
/// merge can read (a number out of range, a lone surrogate, nesting past
/// the parser's depth) is refused with a 400 and writes nothing, as any
/// other such body is; the same patch with a kubelet's order is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patch_whose_order_is_not_json_is_refused_and_writes_nothing() {
    let site = two_nodes();
    let c = site.controller(&[]);
    settled(&c).await;
    let patch = |order: &str| {
        format!(
            r#"{{"status":{{"$setElementOrder/conditions":{order},"conditions":[{{"type":"Ready","status":"True","reason":"KubeletReady","message":"kubelet is posting ready status","lastHeartbeatTime":"2026-12-02T03:10:00Z"}}]}}}}"#
        )
    };
    let before = state(&c, "edge-1").await;
    let deep = format!("[{}1{}]", "[".repeat(200), "]".repeat(200));
    for order in ["[1e400]", r#"[{"type":"\ud800"}]"#, &deep] {
        let (code, status) = c
            .call("PATCH", "/api/v1/nodes/edge-1/status")
            .body("application/strategic-merge-patch+json", patch(order))
            .send()
            .await;
        assert_eq!(code, 400, "{order}: {status}");
        assert_eq!(status["reason"], "BadRequest", "{status}");
    }
    assert_eq!(state(&c, "edge-1").await, before, "nothing was written");
    let (code, node) = c
        .call("PATCH", "/api/v1/nodes/edge-1/status")
        .body(
            "application/strategic-merge-patch+json",
            patch(r#"[{"type":"Ready"}]"#),
        )
        .send()
        .await;
    assert_eq!(code, 200, "{node}");
    let ready = node["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .cloned();
    assert_eq!(ready.unwrap()["status"], "True", "{node}");
    assert!(c.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cannot_move_its_address_onto_another_kubelet() {
    let site = TestSite::start(2, Ipv4Addr::new(127, 83, 11, 1)).await;
    let fleet = &site.fleet;
    let (a, b) = (fleet.name(0), fleet.name(1));
    let (a_ip, b_ip) = (
        fleet.fleet.nodes()[0].address.ip().to_string(),
        fleet.fleet.nodes()[1].address.ip().to_string(),
    );
    let c = site
        .run()
        .tokens(&format!("op\n{a}-secret,{a}\n"))
        .flags(&["--node-status-mode", "probe"])
        .start();
    c.wait_ready(&a, "True").await;
    c.wait_ready(&b, "True").await;
    fleet.handle.set(&a, KubeletState::Down).unwrap();
    c.wait_ready(&a, "Unknown").await;

    // a's own token claims b's kubelet as a's address.
    let claim = json!({"status": {"addresses": [{"type": "InternalIP", "address": b_ip}]}});
    let (code, n) = c
        .call("PATCH", &format!("/api/v1/nodes/{a}/status"))
        .body("application/merge-patch+json", claim.to_string())
        .token(Some(&format!("{a}-secret")))
        .send()
        .await;
    assert_eq!(code, 200, "{n}");
    assert_eq!(
        n["status"]["addresses"],
        json!([{"type": "InternalIP", "address": a_ip}]),
        "the source's address stays"
    );
    // Several more sweeps probe a where its source says it is: still down.
    let probes = |text: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with("nodekeeper_probes_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let start = probes(&c.text("/metrics").await);
    let c = &c;
    eventually("three more sweeps", || async move {
        probes(&c.text("/metrics").await) >= start + 6.0
    })
    .await;
    assert_eq!(c.ready(&a).await.as_deref(), Some("Unknown"));
    let h = c.get(&format!("/v1/history?node={a}")).await.1;
    assert!(
        h.as_array()
            .unwrap()
            .iter()
            .all(|e| e["kind"] != "AddressesChanged"),
        "{h}"
    );
    site.stop().await;
}
