//! The registry follows its static list: nodes dropped from `--nodes` or
//! `--nodes-file` between runs are deleted at start, and while running the
//! nodes file is followed as it changes on disk; a deletion is a `Deleted`
//! event naming the reason, and the history stays. An empty or malformed
//! file changes nothing, and nodes that registered themselves stay.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::path::Path;

use common::*;
use serde_json::{json, Value};

/// Push mode (nothing is probed) with a long grace: only the list changes the registry.
fn args(nodes_file: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--nodes-file",
        nodes_file.to_str().unwrap(),
        "--node-status-mode",
        "push",
        "--kubelet-scheme",
        "http",
        "--node-sync-period",
        "200ms",
        "--node-monitor-grace-period",
        "1h",
        "--node-startup-grace-period",
        "1h",
        "--listen",
        "127.0.0.1:0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Replaces a file at once, as editors and config management do.
fn write(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

async fn names(c: &Controller) -> Vec<String> {
    let (_, list) = c.get("/api/v1/nodes").await;
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

async fn wait_names(c: &Controller, want: &[&str]) {
    c.wait_for("/api/v1/nodes", &format!("exactly {want:?}"), |list| {
        let have: Vec<&str> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["metadata"]["name"].as_str().unwrap())
            .collect();
        have == want
    })
    .await;
}

fn kinds(history: &Value) -> Vec<&str> {
    history
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_dropped_from_the_list_between_runs_are_deleted_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let file = dir.path().join("nodes.txt");
    write(
        &file,
        "edge-1 127.83.20.1\nedge-2 127.83.20.2\nedge-3 127.83.20.3\n",
    );
    let c = Controller::start(&db, &args(&file, &["--nodes", "flag-1,flag-2"]));
    wait_names(&c, &["edge-1", "edge-2", "edge-3", "flag-1", "flag-2"]).await;
    assert!(c.stop().success());

    // edge-3 leaves the file and flag-2 the flag while the controller is down.
    write(&file, "edge-1 127.83.20.1\nedge-2 127.83.20.2\n");
    let c = Controller::start(&db, &args(&file, &["--nodes", "flag-1"]));
    wait_names(&c, &["edge-1", "edge-2", "flag-1"]).await;
    for gone in ["edge-3", "flag-2"] {
        let deleted = c.wait_event(gone, "Deleted").await;
        assert_eq!(
            deleted["reason"], "no longer listed in --nodes / --nodes-file",
            "{deleted}"
        );
        let (_, h) = c.get(&format!("/v1/history?node={gone}")).await;
        let kinds = kinds(&h);
        assert_eq!(
            kinds.first(),
            Some(&"Registered"),
            "the history stays: {kinds:?}"
        );
        assert_eq!(kinds.last(), Some(&"Deleted"), "{kinds:?}");
    }
    assert!(c.stop().success());

    // An empty nodes file at start deletes nothing.
    write(&file, "# nothing here yet\n");
    let c = Controller::start(&db, &args(&file, &[]));
    let decided = "the static node list is empty; static nodes are left as they are";
    let seen = &c;
    eventually("the empty list is seen", || async move {
        seen.log_text().contains(decided)
    })
    .await;
    assert_eq!(names(&c).await, ["edge-1", "edge-2", "flag-1"]);
    assert!(c.stop().success());
    let verify = cli_ok(&db, &["db", "verify"]);
    assert!(verify.contains("ok"), "{verify}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registry_follows_the_nodes_file_as_it_changes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let file = dir.path().join("nodes.yaml");
    write(
        &file,
        "- name: edge-1\n  address: 127.83.21.1\n- name: edge-2\n  address: 127.83.21.2\n",
    );
    let c = Controller::start(&db, &args(&file, &["--allow-node-registration"]));
    wait_names(&c, &["edge-1", "edge-2"]).await;
    // A kubelet registers itself: it is nobody's to delete by the list.
    let register = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "visitor"}});
    let response = client()
        .post(format!("{}/api/v1/nodes", c.url))
        .header("content-type", "application/json")
        .body(register.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 201);

    // edge-2 goes, edge-3 comes, edge-1 moves.
    write(
        &file,
        "- name: edge-1\n  address: 127.83.21.11\n- name: edge-3\n  address: 127.83.21.3\n",
    );
    wait_names(&c, &["edge-1", "edge-3", "visitor"]).await;
    let deleted = c.wait_event("edge-2", "Deleted").await;
    let reason = deleted["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("no longer listed in the nodes file "),
        "{reason}"
    );
    assert!(reason.ends_with("nodes.yaml"), "{reason}");
    let moved = c.wait_event("edge-1", "AddressesChanged").await;
    assert_eq!(
        moved["to"],
        json!([{"type": "InternalIP", "address": "127.83.21.11"}])
    );

    // A malformed file, an empty one, and a missing one change nothing.
    for text in [
        "- name: Not_A_Node\n",
        "- nme: edge-1\n",
        "",
        "# all commented out\n",
    ] {
        // The controller has looked at the file again once it logs about it.
        let logged = c
            .log_text()
            .matches("the registry is left as it is")
            .count();
        write(&file, text);
        eventually("the change is noticed", || {
            let now = c
                .log_text()
                .matches("the registry is left as it is")
                .count();
            async move { now > logged }
        })
        .await;
        assert_eq!(
            names(&c).await,
            ["edge-1", "edge-3", "visitor"],
            "after {text:?}"
        );
    }
    let logged = c.log_text().matches("cannot read the nodes file").count();
    std::fs::remove_file(&file).unwrap();
    eventually("the missing file is noticed", || {
        let now = c.log_text().matches("cannot read the nodes file").count();
        async move { now > logged }
    })
    .await;
    assert_eq!(names(&c).await, ["edge-1", "edge-3", "visitor"]);

    // Good again: followed again.
    write(&file, "- name: edge-3\n  address: 127.83.21.3\n");
    wait_names(&c, &["edge-3", "visitor"]).await;
    assert!(c.stop().success());
    // The deletes were recorded durably, with their reasons.
    let history = json(&cli_ok(&db, &["history", "-o", "json"]));
    let deleted: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "Deleted")
        .map(|e| e["node"].as_str().unwrap())
        .collect();
    assert_eq!(deleted, ["edge-2", "edge-1"]);
}
