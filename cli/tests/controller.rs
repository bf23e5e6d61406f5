//! End to end: the real binary probing a simulated fleet, its API, its
//! history, restarts and a kill -9.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;

use common::*;
use nodekeeper_sim::KubeletState;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_decide_ready_and_every_change_is_history() {
    let site = TestSite::start(3, Ipv4Addr::new(127, 61, 0, 1)).await;
    let (fleet, db) = (&site.fleet, &site.db);

    let c = Controller::start(db, &site.args());
    let (a, b, d) = (fleet.name(0), fleet.name(1), fleet.name(2));
    for n in [&a, &b, &d] {
        c.wait_ready(n, "True").await;
    }

    // A kubelet that stops answering is Unknown after the grace period; a sick one is False at once.
    fleet.handle.set(&a, KubeletState::Down).unwrap();
    fleet.handle.set(&b, KubeletState::Sick).unwrap();
    c.wait_ready(&b, "False").await;
    c.wait_ready(&a, "Unknown").await;
    fleet.handle.set(&b, KubeletState::Up).unwrap();
    c.wait_ready(&b, "True").await;

    // The node JSON is Kubernetes JSON.
    let (status, node) = c.get(&format!("/api/v1/nodes/{b}")).await;
    assert_eq!(status, 200);
    assert_eq!(node["kind"], "Node");
    assert_eq!(node["apiVersion"], "v1");
    assert_eq!(node["metadata"]["name"], b.as_str());
    assert!(node["metadata"]["uid"].as_str().unwrap().len() >= 32);
    let ready = node["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone();
    assert_eq!(ready["reason"], "KubeletReady");
    assert!(ready["lastHeartbeatTime"].as_str().unwrap().ends_with('Z'));
    assert_eq!(node["status"]["capacity"]["memory"], "3Gi");
    let (status, list) = c.get("/api/v1/nodes").await;
    assert_eq!(status, 200);
    assert_eq!(list["kind"], "NodeList");
    assert_eq!(list["items"].as_array().unwrap().len(), 3);
    let (status, missing) = c.get("/api/v1/nodes/nope").await;
    assert_eq!(status, 404);
    assert_eq!(missing["kind"], "Status");
    assert_eq!(missing["reason"], "NotFound");
    assert_eq!(missing["message"], "nodes \"nope\" not found");

    // History over HTTP, filtered by node and condition.
    let (_, history) = c
        .get(&format!("/v1/history?node={b}&condition=Ready"))
        .await;
    let changes: Vec<(String, String)> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["from"].as_str().unwrap().to_string(),
                e["to"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        changes,
        [
            ("Unknown".into(), "True".into()),
            ("True".into(), "False".into()),
            ("False".into(), "True".into())
        ]
    );
    let sick = &history[1];
    assert_eq!(sick["kind"], "ConditionChanged");
    assert_eq!(sick["condition"], "Ready");
    assert_eq!(sick["reason"], "KubeletNotReady");
    assert!(sick["message"].as_str().unwrap().contains("500"), "{sick}");
    assert!(sick["seq"].as_u64().unwrap() > 0);
    assert!(sick["time"].as_str().unwrap().contains('T'));
    let (status, bad) = c.get("/v1/history?since=yesterday").await;
    assert_eq!(status, 400, "{bad}");

    // The CLI finds the running controller by itself (it holds the store's lock).
    let json_out = cli_ok(db, &["history", &a, "--condition", "Ready", "-o", "json"]);
    let events = json(&json_out);
    assert_eq!(events.as_array().unwrap().last().unwrap()["to"], "Unknown");
    let table = cli_ok(db, &["nodes"]);
    assert!(table.starts_with("NAME"), "{table}");
    assert!(table.contains(&a) && table.contains("NotReady"), "{table}");
    let list = json(&cli_ok(db, &["nodes", "-o", "json"]));
    assert_eq!(list["kind"], "NodeList");
    let described = cli_ok(db, &["describe", &b]);
    assert!(
        described.contains("KubeletNotReady") && described.contains("Conditions:"),
        "{described}"
    );

    // Metrics: nodes by status, probe latency, transitions.
    let metrics = c.text("/metrics").await;
    assert!(
        metrics.contains("nodekeeper_nodes{condition=\"Ready\",status=\"Unknown\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("nodekeeper_probe_duration_seconds_bucket"),
        "{metrics}"
    );
    assert!(
        metrics.contains("nodekeeper_condition_transitions_total"),
        "{metrics}"
    );
    assert_eq!(c.text("/healthz").await, "ok");

    assert!(c.stop().success());
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_finds_everything_and_invents_nothing() {
    let site = TestSite::start(2, Ipv4Addr::new(127, 62, 0, 1)).await;
    let (fleet, db) = (&site.fleet, &site.db);

    let args = site.args();
    let (up, down) = (fleet.name(0), fleet.name(1));

    let c = Controller::start(db, &args);
    c.wait_ready(&up, "True").await;
    fleet.handle.set(&down, KubeletState::Down).unwrap();
    c.wait_ready(&down, "Unknown").await;
    // Its taint follows within a monitor period; wait so the stop is at rest.
    let started = Instant::now();
    loop {
        let (_, node) = c.get(&format!("/api/v1/nodes/{down}")).await;
        if node["spec"]["taints"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
        {
            break;
        }
        assert!(started.elapsed() < DEADLINE, "no taint on {down}: {node}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(c.stop().success());

    // Stopped: the CLI reads the store itself.
    let before = json(&cli_ok(db, &["history", "-o", "json"]));
    let before = before.as_array().unwrap().clone();
    assert_eq!(before.last().unwrap()["kind"], "ControllerStopped");
    let listed = json(&cli_ok(db, &["nodes", "-o", "json"]));
    assert_eq!(listed["items"].as_array().unwrap().len(), 2);
    assert!(cli_ok(db, &["db", "status"]).contains("stopped cleanly"));
    assert!(cli_ok(db, &["db", "verify"]).contains("ok:"));

    // Restart with the same nodes: registration is idempotent, and while
    // nothing changes nothing is written but the start. The controller's
    // own passes say when more than a grace period and a sync period
    // have gone by since it started (its first pass), however slow the machine.
    let c = Controller::start(db, &args);
    let first_pass = c
        .wait_pass_after("nodekeeper_last_monitor_pass_timestamp_seconds", 0.0)
        .await;
    let quiet_until = first_pass + GRACE_SECONDS + 0.2;
    c.wait_pass_after("nodekeeper_last_sweep_timestamp_seconds", quiet_until)
        .await;
    c.wait_pass_after(
        "nodekeeper_last_monitor_pass_timestamp_seconds",
        quiet_until,
    )
    .await;
    assert_eq!(c.ready(&up).await.as_deref(), Some("True"));
    assert_eq!(c.ready(&down).await.as_deref(), Some("Unknown"));
    let (_, after) = c.get("/v1/history").await;
    let after = after.as_array().unwrap();
    let new: Vec<&serde_json::Value> = after.iter().skip(before.len()).collect();
    assert_eq!(new.len(), 1, "only ControllerStarted is new: {new:?}");
    assert_eq!(new[0]["kind"], "ControllerStarted");
    assert_eq!(new[0]["previousStopClean"], true);
    assert!(new[0]["downtimeSeconds"].as_f64().unwrap() >= 0.0);
    assert!(new[0]["node"].is_null());

    // A second controller on the same store is refused, naming the first.
    let (code, _, err) = cli(
        db,
        &[
            "run",
            "--nodes",
            "x",
            "--listen",
            "127.0.0.1:0",
            "--kubelet-scheme",
            "http",
        ],
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("another nodekeeper controller is running"),
        "{err}"
    );
    assert!(err.contains(&c.url), "{err}");

    // The node that comes back becomes Ready again.
    fleet.handle.set(&down, KubeletState::Up).unwrap();
    c.wait_ready(&down, "True").await;
    assert!(c.stop().success());
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transition_reported_over_http_survives_kill_9() {
    let site = TestSite::start(2, Ipv4Addr::new(127, 63, 0, 1)).await;
    let (fleet, db) = (&site.fleet, &site.db);

    let c = Controller::start(db, &site.args());
    let victim = fleet.name(1);
    c.wait_ready(&victim, "True").await;
    fleet.handle.set(&victim, KubeletState::Sick).unwrap();
    c.wait_ready(&victim, "False").await;
    let (_, reported) = c
        .get(&format!("/v1/history?node={victim}&condition=Ready"))
        .await;
    let reported = reported.as_array().unwrap().last().unwrap().clone();
    assert_eq!(reported["to"], "False");
    // No clean stop: whatever was not flushed is lost.
    c.kill9();

    let history = json(&cli_ok(db, &["history", &victim, "-o", "json"]));
    assert!(
        history.as_array().unwrap().contains(&reported),
        "lost {reported} after kill -9: {history}"
    );
    let node = json(&cli_ok(db, &["nodes", "-o", "json"]));
    let victim_node = node["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["metadata"]["name"] == victim.as_str())
        .unwrap();
    assert_eq!(ready_of(victim_node).as_deref(), Some("False"));
    assert!(cli_ok(db, &["db", "status"]).contains("without a clean stop"));
    assert!(cli_ok(db, &["db", "verify"]).contains("ok:"));

    // The next controller records the unclean gap.
    let c = Controller::start(db, &site.args());
    let (_, all) = c.get("/v1/history").await;
    let last_start = all
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|e| e["kind"] == "ControllerStarted")
        .unwrap()
        .clone();
    assert_eq!(last_start["previousStopClean"], false);
    assert!(c.stop().success());
    site.stop().await;
}

use std::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unresolvable_node_is_registered_without_address_and_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port().to_string();
    drop(closed);
    let args: Vec<String> = [
        "--nodes",
        "No-Such-Host.invalid,127.0.0.1",
        "--kubelet-scheme",
        "http",
        "--kubelet-port",
        &port,
        "--node-sync-period",
        "200ms",
        "--node-monitor-grace-period",
        "600ms",
        "--listen",
        "127.0.0.1:0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let c = Controller::start(&db, &args);
    // Names are lowercased; the IP name is its own address and, unanswered, goes Unknown after grace.
    let node = c
        .wait_for(
            "/api/v1/nodes/127.0.0.1",
            "the IP-named node registered",
            |n| n["kind"] == "Node",
        )
        .await;
    assert_eq!(node["status"]["addresses"][0]["type"], "InternalIP");
    assert_eq!(node["status"]["addresses"][0]["address"], "127.0.0.1");
    let started = Instant::now();
    loop {
        let (_, history) = c.get("/v1/history?node=no-such-host.invalid").await;
        let kinds: Vec<&str> = history
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["kind"].as_str().unwrap())
            .collect();
        // (Its taints follow its Ready status too; they are not what this test is about.)
        let kinds: Vec<&str> = kinds
            .into_iter()
            .filter(|k| *k != "TaintsChanged")
            .collect();
        if kinds == ["Registered", "AddressLookupFailed"] {
            let message = history[1]["message"].as_str().unwrap();
            assert!(message.contains("unable to query IP address"), "{message}");
            break;
        }
        assert!(started.elapsed() < DEADLINE, "{kinds:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (_, node) = c.get("/api/v1/nodes/no-such-host.invalid").await;
    assert!(
        node["status"]["addresses"]
            .as_array()
            .is_none_or(|a| a.is_empty()),
        "{node}"
    );
    assert!(c.stop().success());
}
