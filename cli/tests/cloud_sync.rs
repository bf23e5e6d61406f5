//! The registry follows an inventory file as machines come and go; a source
//! that fails changes nothing.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;

use common::*;
use serde_json::Value;

fn inventory(fleet: &TestFleet, entries: &[(usize, &str)]) -> String {
    let mut text = String::from("machines:\n");
    for (i, state) in entries {
        let n = &fleet.fleet.nodes()[*i];
        text.push_str(&format!(
            "  - name: {}\n    address: {}\n    zone: rack-{}\n    state: {state}\n",
            n.name,
            n.address.ip(),
            i % 2
        ));
    }
    text
}

/// Replaces the file in one step, as an editor saving it would.
fn write(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registry_follows_an_inventory_file() {
    // The inventory is the only source here.
    let site = TestSite::builder(3, Ipv4Addr::new(127, 121, 0, 1))
        .without_nodes_file()
        .start()
        .await;
    let (fleet, db) = (&site.fleet, &site.db);
    let file = site.path().join("inventory.yaml");
    write(
        &file,
        &inventory(fleet, &[(0, "running"), (1, "running"), (2, "running")]),
    );
    let c = site.controller_with(&[
        "--cloud-provider",
        "inventory",
        "--cloud-config",
        file.to_str().unwrap(),
    ]);
    let (a, b, gone) = (fleet.name(0), fleet.name(1), fleet.name(2));
    for n in [&a, &b, &gone] {
        c.wait_ready(n, "True").await;
    }
    let (_, node) = c.get(&format!("/api/v1/nodes/{a}")).await;
    assert_eq!(
        node["metadata"]["labels"]["topology.kubernetes.io/zone"],
        "rack-0"
    );
    assert_eq!(
        node["metadata"]["annotations"]["nodekeeper.io/source"],
        "cloud/inventory"
    );

    // A machine leaves the inventory, another is shut down (and its kubelet
    // with it: a Ready node is never tainted).
    write(&file, &inventory(fleet, &[(0, "running"), (1, "stopped")]));
    fleet
        .handle
        .set(&b, nodekeeper_sim::KubeletState::Down)
        .unwrap();
    c.wait_for("/api/v1/nodes", "the gone machine deleted", |l| {
        names(l) == [a.clone(), b.clone()]
    })
    .await;
    let (_, history) = c.get(&format!("/v1/history?node={gone}")).await;
    let last = history.as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["kind"], "Deleted", "{history}");
    assert!(
        last["reason"].as_str().unwrap().contains("cloud/inventory"),
        "{last}"
    );
    c.wait_for(&format!("/api/v1/nodes/{b}"), "the shutdown taint", |n| {
        n["spec"]["taints"].as_array().is_some_and(|t| {
            t.iter()
                .any(|t| t["key"] == "node.cloudprovider.kubernetes.io/shutdown")
        })
    })
    .await;

    // The file breaks: nothing changes, and the failure is visible.
    let (_, before) = c.get("/v1/history").await;
    write(&file, "machines:\n  - name: [oops\n");
    let status = c
        .wait_for("/v1/sources", "a failed listing", |s| {
            s["consecutiveFailures"].as_u64() >= Some(2)
        })
        .await;
    assert!(
        status["lastError"].as_str().unwrap().contains("inventory"),
        "{status}"
    );
    let (_, list) = c.get("/api/v1/nodes").await;
    assert_eq!(names(&list), [a.clone(), b.clone()]);
    let (_, after) = c.get("/v1/history").await;
    let new: Vec<&Value> = after
        .as_array()
        .unwrap()
        .iter()
        .skip(before.as_array().unwrap().len())
        .collect();
    assert!(
        new.iter().all(|e| e["kind"] != "Deleted"),
        "a failed listing deleted something: {new:?}"
    );
    let described = cli_ok(db, &["describe", &a]);
    assert!(described.contains("failed listing"), "{described}");
    assert!(c
        .text("/metrics")
        .await
        .contains("nodekeeper_source_list_failures_total"));

    // Fixed, with the machine back and running: registered again, untainted.
    fleet
        .handle
        .set(&b, nodekeeper_sim::KubeletState::Up)
        .unwrap();
    write(
        &file,
        &inventory(fleet, &[(0, "running"), (1, "running"), (2, "running")]),
    );
    c.wait_for("/api/v1/nodes", "the machine back", |l| names(l).len() == 3)
        .await;
    c.wait_for(
        &format!("/api/v1/nodes/{b}"),
        "the shutdown taint gone",
        |n| {
            !n["spec"]["taints"].as_array().is_some_and(|t| {
                t.iter()
                    .any(|t| t["key"] == "node.cloudprovider.kubernetes.io/shutdown")
            })
        },
    )
    .await;
    let (_, history) = c.get(&format!("/v1/history?node={gone}")).await;
    let kinds: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .filter(|k| *k != "TaintsChanged" && *k != "ConditionChanged")
        .collect();
    assert_eq!(kinds, ["Registered", "Deleted", "Registered"], "{history}");
    assert!(c.stop().success());
    assert!(cli_ok(db, &["db", "verify"]).contains("ok:"));
    site.stop().await;
}
