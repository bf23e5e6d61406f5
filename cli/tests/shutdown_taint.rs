//! The shutdown taint goes only on nodes that are not Ready, as the cloud
//! node lifecycle controller does: a source that says "stopped" about a
//! node that answers Ready is behind, not right.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;

use common::*;
use nodekeeper_sim::KubeletState;
use serde_json::Value;

const SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";

fn tainted(node: &Value) -> bool {
    node["spec"]["taints"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["key"] == SHUTDOWN))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_machine_is_tainted_only_while_not_ready() {
    // The inventory is the only source.
    let site = TestSite::builder(1, Ipv4Addr::new(127, 82, 8, 1))
        .without_nodes_file()
        .start()
        .await;
    let fleet = &site.fleet;
    let node = fleet.fleet.nodes()[0].clone();
    let inventory = site.path().join("inventory.yaml");
    let write = |state: &str| {
        let tmp = inventory.with_extension("tmp");
        std::fs::write(
            &tmp,
            format!(
                "machines:\n  - name: {}\n    address: {}\n    state: {state}\n",
                node.name,
                node.address.ip()
            ),
        )
        .unwrap();
        std::fs::rename(&tmp, &inventory).unwrap();
        jiff::Timestamp::now()
    };
    write("running");
    let c = site.controller_with(&[
        "--cloud-provider",
        "inventory",
        "--cloud-config",
        inventory.to_str().unwrap(),
    ]);
    let path = format!("/api/v1/nodes/{}", node.name);
    c.wait_ready(&node.name, "True").await;

    // The source says stopped; the kubelet answers. Once a listing made
    // after the change has been applied, the node is still untainted. One
    // listing runs at a time, so the one applied after the first to be
    // applied after the change started after it, however slow the machine.
    let changed = write("stopped");
    let applied = |s: &Value| {
        s["lastSuccess"]
            .as_str()
            .map(|t| t.parse::<jiff::Timestamp>().unwrap())
    };
    let first = c
        .wait_for("/v1/sources", "a listing applied after the change", |s| {
            applied(s).is_some_and(|t| t > changed)
        })
        .await;
    let first = applied(&first).unwrap();
    c.wait_for("/v1/sources", "a listing made after the change", |s| {
        applied(s).is_some_and(|t| t > first)
    })
    .await;
    let (_, ready) = c.get(&path).await;
    assert_eq!(ready_of(&ready).as_deref(), Some("True"));
    assert!(
        !tainted(&ready),
        "a Ready node got the shutdown taint: {ready}"
    );

    // Really down: tainted once not Ready.
    fleet.handle.set(&node.name, KubeletState::Down).unwrap();
    c.wait_for(&path, "the shutdown taint", tainted).await;
    assert_eq!(c.ready(&node.name).await.as_deref(), Some("Unknown"));

    // Back, though the source still says stopped: Ready, and the taint goes.
    fleet.handle.set(&node.name, KubeletState::Up).unwrap();
    c.wait_for(&path, "the shutdown taint removed", |n| {
        !tainted(n) && ready_of(n).as_deref() == Some("True")
    })
    .await;
    assert!(c.stop().success());
    site.stop().await;
}
