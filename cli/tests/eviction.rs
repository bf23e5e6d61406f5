//! Eviction standalone: taints follow Ready, a node down past the timeout
//! is evicted (event and hook), a site-wide outage evicts nothing.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;

use common::*;
use nodekeeper_sim::KubeletState;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_down_past_the_timeout_is_tainted_evicted_and_hooked() {
    let site = TestSite::start(4, Ipv4Addr::new(127, 111, 0, 1)).await;
    let (fleet, dir, db, _nodes) = (&site.fleet, site.dir.path(), &site.db, &site.nodes_file);

    let hooked = dir.join("hooked");
    let hook = format!("echo >> {}", hooked.display());
    let c = site.controller_with(&["--pod-eviction-timeout", "1s", "--eviction-hook", &hook]);
    let victim = fleet.name(0);
    for i in 0..4 {
        c.wait_ready(&fleet.name(i), "True").await;
    }
    fleet.handle.set(&victim, KubeletState::Down).unwrap();
    c.wait_ready(&victim, "Unknown").await;
    // NoSchedule at once, NoExecute once evicted.
    let path = format!("/api/v1/nodes/{victim}");
    c.wait_for(&path, "NoExecute taint", |n| {
        taints(n).contains(&"node.kubernetes.io/unreachable:NoExecute".to_string())
    })
    .await;
    let history = c
        .wait_for(&format!("/v1/history?node={victim}"), "EvictionDone", |h| {
            h.as_array()
                .unwrap()
                .iter()
                .any(|e| e["kind"] == "EvictionDone")
        })
        .await;
    let started = history
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "EvictionStarted")
        .unwrap();
    assert_eq!(started["mode"], "taint");
    assert!(
        started["reason"]
            .as_str()
            .unwrap()
            .starts_with("not Ready for"),
        "{started}"
    );
    let done = history
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "EvictionDone")
        .unwrap();
    assert_eq!(done["result"], "hook succeeded");
    let line = std::fs::read_to_string(&hooked).unwrap();
    assert!(
        line.starts_with(&format!("{victim} not Ready for")),
        "{line}"
    );

    // It comes back: taints go, and it is never evicted again for the old outage.
    fleet.handle.set(&victim, KubeletState::Up).unwrap();
    c.wait_ready(&victim, "True").await;
    c.wait_for(&path, "taints removed", |n| taints(n).is_empty())
        .await;
    let metrics = c.text("/metrics").await;
    assert!(
        metrics.contains("nodekeeper_evictions_total 1"),
        "{metrics}"
    );
    assert!(cli_ok(db, &["db", "status"]).contains("running"));
    assert!(c.stop().success());
    // The registry's taints agree with their history.
    assert!(cli_ok(db, &["db", "verify"]).contains("ok:"));
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_node_is_down_nothing_is_evicted() {
    let site = TestSite::start(3, Ipv4Addr::new(127, 112, 0, 1)).await;
    let fleet = &site.fleet;

    let c = site.controller_with(&["--pod-eviction-timeout", "500ms"]);
    for i in 0..3 {
        c.wait_ready(&fleet.name(i), "True").await;
    }
    // The whole site vanishes: the network, not the nodes.
    fleet.handle.set_all(KubeletState::Down);
    for i in 0..3 {
        c.wait_ready(&fleet.name(i), "Unknown").await;
    }
    let all_unknown = unix_now();
    // An eviction timeout passes: NoSchedule taints, no evictions.
    let path = format!("/api/v1/nodes/{}", fleet.name(0));
    c.wait_for(&path, "NoSchedule", |n| {
        taints(n) == ["node.kubernetes.io/unreachable:NoSchedule"]
    })
    .await;
    // By the controller's own monitor passes: one that began after every
    // node was seen Unknown (from then on they count as not Ready), then one
    // that began more than an eviction timeout after that. Every node was
    // then due; none is evicted.
    let counted_from = c
        .wait_pass_after(
            "nodekeeper_last_monitor_pass_timestamp_seconds",
            all_unknown,
        )
        .await;
    c.wait_pass_after(
        "nodekeeper_last_monitor_pass_timestamp_seconds",
        counted_from + 0.5 + 0.1,
    )
    .await;
    let (_, history) = c.get("/v1/history").await;
    assert!(
        !history
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "EvictionStarted"),
        "{history}"
    );
    assert_eq!(
        c.metric("nodekeeper_evictions_total").await,
        Some(0.0),
        "{history}"
    );
    assert!(c.stop().success());
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_interrupted_by_a_crash_is_resumed_after_the_restart() {
    let site = TestSite::start(4, Ipv4Addr::new(127, 113, 0, 1)).await;
    let (fleet, dir, db) = (&site.fleet, site.dir.path(), &site.db);

    let marker = dir.join("resumed");
    let victim = fleet.name(0);
    let with_hook = |hook: &str| {
        let mut args = site.args();
        args.extend(["--pod-eviction-timeout", "1s", "--eviction-hook", hook].map(String::from));
        args
    };
    // A hook that never finishes in time: the controller is killed meanwhile.
    let c = Controller::start(db, &with_hook("sleep 600; true"));
    for i in 0..4 {
        c.wait_ready(&fleet.name(i), "True").await;
    }
    fleet.handle.set(&victim, KubeletState::Down).unwrap();
    c.wait_for(
        &format!("/v1/history?node={victim}"),
        "EvictionStarted",
        |h| {
            h.as_array()
                .unwrap()
                .iter()
                .any(|e| e["kind"] == "EvictionStarted")
        },
    )
    .await;
    c.kill9();

    // The next controller runs the hook again once it knows the node is still down.
    // The hook gets the node's name and the reason as its arguments.
    let hook = format!("echo >> {}", marker.display());
    let c = Controller::start(db, &with_hook(&hook));
    let history = c
        .wait_for(&format!("/v1/history?node={victim}"), "EvictionDone", |h| {
            h.as_array()
                .unwrap()
                .iter()
                .any(|e| e["kind"] == "EvictionDone")
        })
        .await;
    let done = history
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "EvictionDone")
        .unwrap();
    assert_eq!(done["result"], "hook succeeded", "{history}");
    let line = std::fs::read_to_string(&marker).unwrap();
    assert!(
        line.starts_with(&format!("{victim} not Ready for")),
        "{line}"
    );
    assert!(
        line.trim_end()
            .ends_with("(resumed after a controller restart)"),
        "{line}"
    );
    assert!(c.stop().success());
    site.stop().await;
}
