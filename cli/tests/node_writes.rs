//! Operators act on nodes through kubectl (and the CLI), against nodekeeper
//! itself: cordon, label, annotate, taint, edit, replace, delete; what they
//! may not change is refused by name; every change is durable and in the
//! history with who made it; the controller's taints and operators' sit
//! side by side; eviction respects cordons; and the mirror carries operator
//! changes up while leaving the cluster's own alone.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;

use common::*;
use nodekeeper_sim::apiserver::FakeApiServer;
use nodekeeper_sim::KubeletState;
use serde_json::{json, Value};

/// A grace no stalled machine outlasts, for the tests whose nodes must stay
/// Ready: between a read and the write that follows it (kubectl's, or a
/// PUT), a healthy node going Unknown would change the node (its taint),
/// and the write would be refused.
const STEADY: &str = "20s";

async fn history(c: &Controller, node: &str) -> Vec<Value> {
    let (_, h) = c.get(&format!("/v1/history?node={node}")).await;
    h.as_array().unwrap().clone()
}

fn operator_changes(history: &[Value]) -> Vec<&Value> {
    history
        .iter()
        .filter(|e| e["kind"] == "OperatorChanged")
        .collect()
}

fn row_status(table: &str, name: &str) -> String {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or_else(|| panic!("no row for {name}: {table}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_cordons_labels_taints_and_uncordons_a_node() {
    let site = TestSite::builder(2, Ipv4Addr::new(127, 83, 1, 1))
        .grace(STEADY)
        .start()
        .await;
    let (fleet, dir, db) = (&site.fleet, site.dir.path(), &site.db);

    let c = Controller::start(db, &site.args());
    let (a, b) = (fleet.name(0), fleet.name(1));
    c.wait_settled(&a).await;
    c.wait_settled(&b).await;
    let k = Kubectl::new(&c.url, dir);

    assert_eq!(
        k.ok(&["cordon", &a]).await.trim(),
        format!("node/{a} cordoned")
    );
    let table = k.ok(&["get", "nodes"]).await;
    assert_eq!(
        row_status(&table, &a),
        "Ready,SchedulingDisabled",
        "{table}"
    );
    assert_eq!(row_status(&table, &b), "Ready", "{table}");
    k.ok(&["label", "node", &a, "maintenance=true"]).await;
    k.ok(&["annotate", "node", &a, "example.com/ticket=OPS-42"])
        .await;
    k.ok(&["taint", "node", &a, "dedicated=gpu:NoSchedule"])
        .await;
    k.ok(&[
        "patch",
        "node",
        &b,
        "--type",
        "json",
        "-p",
        r#"[{"op": "add", "path": "/metadata/labels/rack", "value": "r1"}]"#,
    ])
    .await;
    let racks = k.ok(&["get", "nodes", "-l", "rack=r1", "-o", "name"]).await;
    assert_eq!(racks.trim(), format!("node/{b}"));

    // Durable before the answer: a kill -9 right after loses none of it.
    c.kill9();
    let c = Controller::start(db, &site.args());
    let (_, node) = c.get(&format!("/api/v1/nodes/{a}")).await;
    assert_eq!(node["spec"]["unschedulable"], true, "{node}");
    assert_eq!(node["metadata"]["labels"]["maintenance"], "true");
    assert_eq!(
        node["metadata"]["annotations"]["example.com/ticket"],
        "OPS-42"
    );
    assert_eq!(
        node["metadata"]["annotations"]["nodekeeper.io/source"],
        "static"
    );
    assert_eq!(taints(&node), ["dedicated:NoSchedule"]);

    // The history says what changed and who did it.
    let h = history(&c, &a).await;
    let changes = operator_changes(&h);
    assert_eq!(changes.len(), 4, "{h:?}");
    assert!(
        changes[0]["by"]
            .as_str()
            .unwrap()
            .starts_with("system:anonymous (kubectl/"),
        "{}",
        changes[0]
    );
    assert_eq!(
        changes[0]["changes"],
        json!([{"field": "spec.unschedulable", "from": false, "to": true}])
    );
    assert_eq!(
        changes[1]["changes"],
        json!([{"field": "metadata.labels", "key": "maintenance", "from": null, "to": "true"}])
    );
    let k = Kubectl::new(&c.url, dir);
    let described = k.ok(&["describe", "node", &a]).await;
    assert!(
        described.contains("Unschedulable:      true"),
        "{described}"
    );
    assert!(described.contains("cordoned"), "{described}");
    assert!(
        described.contains("taint dedicated=gpu:NoSchedule added"),
        "{described}"
    );

    // The node goes down: the controller's taint joins the operator's, which stays.
    fleet.handle.set(&a, KubeletState::Sick).unwrap();
    c.wait_ready(&a, "False").await;
    let node = c
        .wait_for(&format!("/api/v1/nodes/{a}"), "the not-ready taint", |n| {
            taints(n).contains(&"node.kubernetes.io/not-ready:NoSchedule".to_string())
        })
        .await;
    assert_eq!(
        taints(&node),
        [
            "dedicated:NoSchedule",
            "node.kubernetes.io/not-ready:NoSchedule"
        ]
    );
    assert_eq!(
        row_status(&k.ok(&["get", "nodes"]).await, &a),
        "NotReady,SchedulingDisabled"
    );

    // What operators may not write is refused, by name, and changes nothing.
    let before =
        c.get(&format!("/api/v1/nodes/{a}")).await.1["metadata"]["resourceVersion"].clone();
    k.refused(
        &[
            "taint",
            "node",
            &a,
            "node.kubernetes.io/not-ready:NoSchedule-",
        ],
        "spec.taints: Forbidden",
    )
    .await;
    k.refused(
        &[
            "taint",
            "node",
            &a,
            "node.kubernetes.io/unreachable:NoExecute",
        ],
        "spec.taints: Forbidden",
    )
    .await;
    k.refused(
        &[
            "annotate",
            "--overwrite",
            "node",
            &a,
            "nodekeeper.io/source=cloud/x",
        ],
        "metadata.annotations[nodekeeper.io/source]: Forbidden",
    )
    .await;
    k.refused(
        &[
            "patch",
            "node",
            &a,
            "--type",
            "merge",
            "-p",
            r#"{"status": {"conditions": [{"type": "Ready", "status": "True"}]}}"#,
        ],
        "status: Forbidden",
    )
    .await;
    k.refused(&["label", "node", &a, "bad key=x"], "").await;
    k.refused(
        &["label", "node", &a, "kubernetes.io/hostname-"],
        "Forbidden",
    )
    .await;
    k.refused(&["delete", "node", &a], "listed by the static node list")
        .await;
    let after = c.get(&format!("/api/v1/nodes/{a}")).await.1["metadata"]["resourceVersion"].clone();
    assert_eq!(before, after, "refused writes wrote nothing");
    let (code, s) = c.call("PATCH", &format!("/api/v1/nodes/{a}")).body("application/merge-patch+json", r#"{"metadata": {"labels": {"ok": "yes", "bad/key/x": "y"}}, "spec": {"taints": [{"key": "a", "effect": "Never"}]}}"#).send().await;
    assert_eq!((code, s["reason"].as_str()), (422, Some("Invalid")), "{s}");
    let fields: Vec<&str> = s["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        ["metadata.labels", "spec.taints[0].effect", "spec.taints"],
        "{s}"
    );

    // kubectl edit and replace (without OpenAPI documents, kubectl validates nothing client-side).
    k.ok(&["label", "node", &a, "maintenance=done", "--overwrite"])
        .await;
    let (code, out, err) = k
        .run_with(
            &["edit", "--validate=false", "node", &a],
            &[(
                "EDITOR",
                "sed -i s/maintenance:\\ done/maintenance:\\ edited/",
            )],
        )
        .await;
    assert_eq!(code, 0, "{out}{err}");
    let yaml_path = dir.join("node.yaml");
    std::fs::write(
        &yaml_path,
        k.ok(&["get", "node", &a, "-o", "yaml"])
            .await
            .replace("maintenance: edited", "maintenance: replaced"),
    )
    .unwrap();
    k.ok(&[
        "replace",
        "--validate=false",
        "-f",
        yaml_path.to_str().unwrap(),
    ])
    .await;
    assert_eq!(
        c.get(&format!("/api/v1/nodes/{a}")).await.1["metadata"]["labels"]["maintenance"],
        "replaced"
    );

    // Back to service: the operator's taint, label and cordon go; the controller's taint follows Ready.
    fleet.handle.set(&a, KubeletState::Up).unwrap();
    c.wait_settled(&a).await;
    k.ok(&["taint", "node", &a, "dedicated-"]).await;
    k.ok(&["label", "node", &a, "maintenance-"]).await;
    assert_eq!(
        k.ok(&["uncordon", &a]).await.trim(),
        format!("node/{a} uncordoned")
    );
    let node = c
        .wait_for(&format!("/api/v1/nodes/{a}"), "no taints left", |n| {
            taints(n).is_empty()
        })
        .await;
    assert!(node["spec"]["unschedulable"].is_null(), "{node}");
    assert!(node["metadata"]["labels"]["maintenance"].is_null());
    assert_eq!(row_status(&k.ok(&["get", "nodes"]).await, &a), "Ready");
    // Every operator change is there, the controller's own beside them.
    let (_, all) = c.get(&format!("/v1/history?node={a}")).await;
    let kinds: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"TaintsChanged"), "{kinds:?}");
    assert_eq!(
        kinds.iter().filter(|k| **k == "OperatorChanged").count(),
        10,
        "{kinds:?}"
    );
    assert!(c.stop().success());
    let verify = cli_ok(db, &["db", "verify"]);
    assert!(verify.contains("ok"), "{verify}");
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_follow_kube_apiserver_preconditions() {
    let site = TestSite::builder(1, Ipv4Addr::new(127, 83, 2, 1))
        .grace(STEADY)
        .start()
        .await;
    let (fleet, db) = (&site.fleet, &site.db);

    let c = Controller::start(db, &site.args());
    let a = fleet.name(0);
    c.wait_ready(&a, "True").await;
    let path = format!("/api/v1/nodes/{a}");
    // Settled: Ready, and the taint it had until then gone.
    let node = c
        .wait_for(&path, "no taints", |n| n["spec"]["taints"].is_null())
        .await;
    let rv = node["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    // A stale resourceVersion in a PUT or a patch: 409, nothing written.
    let mut stale = node.clone();
    stale["metadata"]["resourceVersion"] = json!("1");
    stale["spec"]["unschedulable"] = json!(true);
    let (code, s) = c.call("PUT", &path).json(&stale).send().await;
    assert_eq!((code, s["reason"].as_str()), (409, Some("Conflict")), "{s}");
    let (code, s) = c
        .call("PATCH", &path)
        .body(
            "application/merge-patch+json",
            r#"{"metadata": {"resourceVersion": "1"}, "spec": {"unschedulable": true}}"#,
        )
        .send()
        .await;
    assert_eq!((code, s["reason"].as_str()), (409, Some("Conflict")), "{s}");
    let (code, s) = c.call("PATCH", &path).body("application/json-patch+json", r#"[{"op": "test", "path": "/spec/unschedulable", "value": true}, {"op": "remove", "path": "/spec/unschedulable"}]"#).send().await;
    assert_eq!(code, 422, "a failed test operation: {s}");
    assert_eq!(
        c.get(&path).await.1["metadata"]["resourceVersion"],
        rv.as_str()
    );

    // The current version: accepted, and the answer is the new node.
    let mut put = node.clone();
    put["spec"]["unschedulable"] = json!(true);
    let (code, n) = c.call("PUT", &path).json(&put).send().await;
    assert_eq!(code, 200, "{n}");
    assert_eq!(n["spec"]["unschedulable"], true);
    assert_ne!(n["metadata"]["resourceVersion"], rv.as_str());
    // The same write again changes nothing and writes nothing.
    let again = n["metadata"]["resourceVersion"].clone();
    let (code, n) = c
        .call("PATCH", &path)
        .body(
            "application/strategic-merge-patch+json",
            r#"{"spec": {"unschedulable": true}}"#,
        )
        .send()
        .await;
    assert_eq!((code, &n["metadata"]["resourceVersion"]), (200, &again));
    // A PUT claiming another Ready status is refused.
    let mut claim = n.clone();
    claim["status"]["conditions"][0]["status"] = json!("False");
    let (code, s) = c.call("PUT", &path).json(&claim).send().await;
    assert_eq!(code, 422, "{s}");
    assert_eq!(s["details"]["causes"][0]["field"], "status.conditions");
    // Wrong formats and names.
    let (code, s) = c
        .call("PATCH", &path)
        .body("application/apply-patch+yaml", "{}")
        .send()
        .await;
    assert_eq!(
        (code, s["reason"].as_str()),
        (415, Some("UnsupportedMediaType")),
        "{s}"
    );
    let mut other = n.clone();
    other["metadata"]["name"] = json!("someone-else");
    let (code, _) = c.call("PUT", &path).json(&other).send().await;
    assert_eq!(code, 400);
    let (code, s) = c
        .call("PATCH", "/api/v1/nodes/nope")
        .body("application/merge-patch+json", "{}")
        .send()
        .await;
    assert_eq!((code, s["reason"].as_str()), (404, Some("NotFound")), "{s}");
    // A delete whose preconditions do not hold.
    let (code, s) = c
        .call("DELETE", &path)
        .body(
            "application/json",
            r#"{"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "not-it"}}"#,
        )
        .send()
        .await;
    assert_eq!((code, s["reason"].as_str()), (409, Some("Conflict")), "{s}");
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .contains("Precondition failed"),
        "{s}"
    );
    assert!(c.stop().success());
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tokens_the_history_names_the_operator_and_nodes_may_not_cordon() {
    let site = TestSite::start(2, Ipv4Addr::new(127, 83, 3, 1)).await;
    let (fleet, dir, db) = (&site.fleet, site.dir.path(), &site.db);

    let (a, b) = (fleet.name(0), fleet.name(1));
    let c = site
        .run()
        .tokens(&format!(
            "alice-secret,alice,uid-1,\"ops\"\nplain-secret\n{a}-secret,{a}\n"
        ))
        .start();
    let tokens = dir.join("tokens");
    c.wait_ready(&a, "True").await;
    let cordon = r#"{"spec": {"unschedulable": true}}"#;
    let ct = "application/strategic-merge-patch+json";
    let (code, _) = c
        .call("PATCH", &format!("/api/v1/nodes/{a}"))
        .body(ct, cordon)
        .token(None)
        .send()
        .await;
    assert_eq!(code, 401);
    // A node's token may push its status, never cordon (even itself) or delete.
    let (code, s) = c
        .call("PATCH", &format!("/api/v1/nodes/{a}"))
        .body(ct, cordon)
        .token(Some(&format!("{a}-secret")))
        .send()
        .await;
    assert_eq!(
        (code, s["reason"].as_str()),
        (403, Some("Forbidden")),
        "{s}"
    );
    let (code, _) = c
        .call("DELETE", &format!("/api/v1/nodes/{b}"))
        .body(ct, "")
        .token(Some(&format!("{a}-secret")))
        .send()
        .await;
    assert_eq!(code, 403);
    let (code, s) = c
        .call("PATCH", &format!("/api/v1/nodes/{a}"))
        .body(ct, cordon)
        .token(Some("alice-secret"))
        .send()
        .await;
    assert_eq!(code, 200, "{s}");
    let (code, _) = c
        .call("PATCH", &format!("/api/v1/nodes/{b}"))
        .body(
            "application/merge-patch+json",
            r#"{"metadata": {"labels": {"x": "y"}}}"#,
        )
        .token(Some("plain-secret"))
        .send()
        .await;
    assert_eq!(code, 200);
    assert_eq!(operator_changes(&history(&c, &a).await)[0]["by"], "alice");
    assert_eq!(
        operator_changes(&history(&c, &b).await)[0]["by"],
        "operator (token of line 2 of ".to_string() + &tokens.to_string_lossy() + ")"
    );
    // The CLI carries a token too, and says what to do without one.
    let (code, _, err) = cli(db, &["uncordon", &a]);
    assert_ne!(code, 0);
    assert!(err.contains("--token"), "{err}");
    let out = cli_ok(db, &["--token", "alice-secret", "uncordon", &a]);
    assert_eq!(out.trim(), format!("node/{a} uncordoned"));
    assert!(c.stop().success());
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_no_source_lists_is_deleted_and_its_history_kept() {
    let site = TestSite::builder(1, Ipv4Addr::new(127, 83, 4, 1))
        .push_mode()
        .start()
        .await;
    let (dir, db) = (&site.dir, &site.db);
    let listed = site.name(0);
    let c = site.controller_with(&["--allow-node-registration"]);
    let register = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "visitor"},
        "status": {"addresses": [{"type": "InternalIP", "address": "127.83.4.2"}]}});
    let (code, s) = c.call("POST", "/api/v1/nodes").json(&register).send().await;
    assert_eq!(code, 201, "{s}");
    let k = Kubectl::new(&c.url, dir.path());
    k.ok(&["label", "node", "visitor", "team=edge"]).await;
    let out = k.ok(&["delete", "node", "visitor"]).await;
    assert_eq!(out.trim(), "node \"visitor\" deleted");
    let (code, _) = c.get("/api/v1/nodes/visitor").await;
    assert_eq!(code, 404);
    let h = history(&c, "visitor").await;
    let kinds: Vec<&str> = h.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"Registered"), "{h:?}");
    assert!(kinds.contains(&"OperatorChanged"), "{h:?}");
    assert_eq!(kinds.last(), Some(&"Deleted"), "{h:?}");
    let deleted = h.last().unwrap();
    assert!(
        deleted["reason"]
            .as_str()
            .unwrap()
            .starts_with("deleted by system:anonymous (kubectl/"),
        "{deleted}"
    );
    // The listed one stays, and the refusal says what to change.
    let err = k.refused(&["delete", "node", &listed], "(Conflict)").await;
    assert!(err.contains("remove it from that list"), "{err}");
    assert!(c.stop().success());
    // On the stopped store, the same rule from what the last run listed.
    let (code, _, err) = cli(db, &["delete", &listed]);
    assert_eq!(code, 1);
    assert!(err.contains("listed by the static node list"), "{err}");
    let verify = cli_ok(db, &["db", "verify"]);
    assert!(verify.contains("ok"), "{verify}");
    let at = cli_ok(db, &["history", "visitor"]);
    assert!(at.contains("Deleted"), "{at}");
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_writes_through_a_running_controller_and_on_a_stopped_store() {
    let site = TestSite::builder(1, Ipv4Addr::new(127, 83, 5, 1))
        .grace(STEADY)
        .start()
        .await;
    let (fleet, db) = (&site.fleet, &site.db);

    let a = fleet.name(0);
    let c = Controller::start(db, &site.args());
    c.wait_ready(&a, "True").await;
    // Settled: the taint it had until Ready gone.
    c.wait_for(&format!("/api/v1/nodes/{a}"), "no taints", |n| {
        n["spec"]["taints"].is_null()
    })
    .await;
    assert_eq!(
        cli_ok(db, &["cordon", &a]).trim(),
        format!("node/{a} cordoned")
    );
    assert_eq!(
        cli_ok(db, &["cordon", &a]).trim(),
        format!("node/{a} already cordoned")
    );
    cli_ok(db, &["label", &a, "maintenance=true"]);
    cli_ok(db, &["taint", &a, "dedicated=gpu:NoSchedule"]);
    let (code, _, err) = cli(db, &["taint", &a, "dedicated=cpu:NoSchedule"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--overwrite"), "{err}");
    let (code, _, err) = cli(
        db,
        &["taint", &a, "node.kubernetes.io/unreachable:NoSchedule"],
    );
    assert_ne!(code, 0);
    assert!(err.contains("spec.taints: Forbidden"), "{err}");
    let (_, node) = c.get(&format!("/api/v1/nodes/{a}")).await;
    assert_eq!(node["spec"]["unschedulable"], true);
    assert_eq!(taints(&node), ["dedicated:NoSchedule"]);
    assert!(c.stop().success());

    // Stopped: the same commands, the same checks, the same history.
    assert_eq!(
        cli_ok(db, &["uncordon", &a]).trim(),
        format!("node/{a} uncordoned")
    );
    cli_ok(db, &["taint", &a, "dedicated-"]);
    cli_ok(db, &["label", &a, "maintenance-", "rack=r9"]);
    let (code, _, err) = cli(db, &["annotate", &a, "nodekeeper.io/source=x"]);
    assert_ne!(code, 0);
    assert!(err.contains("Forbidden"), "{err}");
    let h = json(&cli_ok(db, &["history", &a, "-o", "json"]));
    let by: Vec<&str> = h
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "OperatorChanged")
        .map(|e| e["by"].as_str().unwrap())
        .collect();
    assert_eq!(by.len(), 6, "{h}");
    assert!(by[0].starts_with("system:anonymous (nodekeeper/"), "{by:?}");
    assert!(
        by[3].ends_with("(nodekeeper CLI on the stopped store)"),
        "{by:?}"
    );
    let verify = cli_ok(db, &["db", "verify"]);
    assert!(verify.contains("ok"), "{verify}");
    // The next run starts from it.
    let c = Controller::start(db, &site.args());
    let (_, node) = c.get(&format!("/api/v1/nodes/{a}")).await;
    assert!(node["spec"]["unschedulable"].is_null(), "{node}");
    assert_eq!(node["metadata"]["labels"]["rack"], "r9");
    assert!(taints(&node).is_empty());
    assert!(c.stop().success());
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cordoned_node_is_evicted_only_for_its_conditions() {
    let site = TestSite::builder(3, Ipv4Addr::new(127, 83, 6, 1))
        .grace(STEADY)
        .start()
        .await;
    let fleet = &site.fleet;
    let c = site.controller_with(&["--pod-eviction-timeout", "1s", "--node-eviction-rate", "10"]);
    let (a, b) = (fleet.name(0), fleet.name(1));
    // Settled: a's taint-free state below is the controller's own decision, not a leftover.
    for n in [&a, &b] {
        c.wait_settled(n).await;
    }
    let cordon =
        r#"{"spec": {"unschedulable": true}, "metadata": {"labels": {"maintenance": "true"}}}"#;
    for n in [&a, &b] {
        let (code, s) = c
            .call("PATCH", &format!("/api/v1/nodes/{n}"))
            .body("application/merge-patch+json", cordon)
            .send()
            .await;
        assert_eq!(code, 200, "{s}");
    }
    // b goes down while cordoned; a stays up, cordoned, well past the eviction timeout.
    fleet.handle.set(&b, KubeletState::Sick).unwrap();
    let evicted = c.wait_event(&b, "EvictionStarted").await;
    assert!(
        evicted["reason"]
            .as_str()
            .unwrap()
            .starts_with("not Ready for"),
        "{evicted}"
    );
    let node = c
        .wait_for(&format!("/api/v1/nodes/{b}"), "NoExecute", |n| {
            taints(n).contains(&"node.kubernetes.io/not-ready:NoExecute".to_string())
        })
        .await;
    assert_eq!(node["spec"]["unschedulable"], true, "the cordon stays");
    assert_eq!(node["metadata"]["labels"]["maintenance"], "true");
    // By now a has been cordoned for more than the timeout, over many monitor passes.
    let (_, node) = c.get(&format!("/api/v1/nodes/{a}")).await;
    assert!(taints(&node).is_empty(), "{node}");
    let h = history(&c, &a).await;
    assert!(h.iter().all(|e| e["kind"] != "EvictionStarted"), "{h:?}");
    let metrics = c.text("/metrics").await;
    assert!(
        metrics.contains("nodekeeper_evictions_total 1\n"),
        "{metrics}"
    );
    assert!(c.stop().success());
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_changes_go_up_and_the_clusters_own_stay() {
    let site = TestSite::builder(2, Ipv4Addr::new(127, 83, 7, 1))
        .grace(STEADY)
        .start()
        .await;
    let (fleet, dir) = (&site.fleet, site.dir.path());
    let api = FakeApiServer::start().await;
    let c = site.controller_with(&[
        "--master",
        &api.url(),
        "--kube-api-timeout",
        "2s",
        "--leader-elect",
        "false",
    ]);
    let (a, b) = (fleet.name(0), fleet.name(1));
    c.wait_settled(&a).await;
    let upstream = |name: &str| api.node(name).unwrap_or(Value::Null);
    eventually("both nodes upstream", || {
        let ok = api.node(&a).is_some() && api.node(&b).is_some();
        async move { ok }
    })
    .await;
    // Someone works on the cluster directly: a label and a taint on a, a cordon on b.
    let mut theirs = upstream(&a);
    theirs["metadata"]["labels"]["team"] = json!("storage");
    theirs["spec"]["taints"] = json!([{"key": "theirs", "effect": "NoSchedule"}]);
    api.put_node(theirs);
    let mut cordoned = upstream(&b);
    cordoned["spec"]["unschedulable"] = json!(true);
    api.put_node(cordoned);

    let k = Kubectl::new(&c.url, dir);
    k.ok(&["cordon", &a]).await;
    k.ok(&["label", "node", &a, "maintenance=true"]).await;
    k.ok(&["taint", "node", &a, "dedicated=gpu:NoSchedule"])
        .await;
    eventually("the operator's changes upstream", || {
        let n = upstream(&a);
        let ok = n["spec"]["unschedulable"] == true
            && n["metadata"]["labels"]["maintenance"] == "true"
            && taints(&n).contains(&"dedicated:NoSchedule".to_string());
        async move { ok }
    })
    .await;
    let n = upstream(&a);
    assert_eq!(
        n["metadata"]["labels"]["team"], "storage",
        "theirs stays: {n}"
    );
    assert!(taints(&n).contains(&"theirs:NoSchedule".to_string()), "{n}");

    // Undone here: undone there; the cluster's own still stay.
    k.ok(&["uncordon", &a]).await;
    k.ok(&["label", "node", &a, "maintenance-"]).await;
    k.ok(&["taint", "node", &a, "dedicated-"]).await;
    eventually("the operator's changes undone upstream", || {
        let n = upstream(&a);
        let ok = n["spec"]["unschedulable"] != true
            && n["metadata"]["labels"]["maintenance"].is_null()
            && !taints(&n).contains(&"dedicated:NoSchedule".to_string());
        async move { ok }
    })
    .await;
    let n = upstream(&a);
    assert_eq!(n["metadata"]["labels"]["team"], "storage", "{n}");
    assert_eq!(taints(&n), ["theirs:NoSchedule"], "{n}");
    // b's cordon, made on the cluster, survives b's syncs (a label here makes one).
    k.ok(&["label", "node", &b, "rack=r2"]).await;
    eventually("b's label upstream", || {
        let ok = upstream(&b)["metadata"]["labels"]["rack"] == "r2";
        async move { ok }
    })
    .await;
    assert_eq!(upstream(&b)["spec"]["unschedulable"], true);
    assert!(c.stop().success());
    site.stop().await;
}
