//! Time the controller did not run is not the nodes' silence, and readers
//! never slow its decisions: against the real binary, a controller stopped
//! (SIGSTOP) for twice the grace period, and one serving readers listing
//! back to back, declare no healthy node Unknown.
// These tests stop a real process and load it for real time: they wait in it.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// The grace period of these sites: short, so a stop of twice it is short too.
const GRACE: Duration = Duration::from_secs(2);

/// Condition changes in the history after `seq`, one line each.
async fn transitions_after(c: &Controller, seq: u64) -> Vec<String> {
    let (_, history) = c.get("/v1/history").await;
    history
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["seq"].as_u64().unwrap() > seq && e["kind"] == "ConditionChanged")
        .map(|e| {
            format!(
                "{} {} {} -> {}",
                e["node"], e["condition"], e["from"], e["to"]
            )
        })
        .collect()
}

/// Fails, with the first few, if there are any.
fn assert_none(transitions: &[String]) {
    assert!(
        transitions.is_empty(),
        "{} transitions, the first: {:#?}",
        transitions.len(),
        &transitions[..transitions.len().min(5)]
    );
}

async fn last_seq(c: &Controller) -> u64 {
    let (_, history) = c.get("/v1/history").await;
    history
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["seq"].as_u64())
        .max()
        .unwrap_or(0)
}

async fn all_ready(c: &Controller, site: &TestSite, nodes: usize) {
    for i in 0..nodes {
        c.wait_ready(&site.name(i), "True").await;
    }
}

/// Stops the controller for `pause` (SIGSTOP), then lets it go on (SIGCONT).
async fn pause(c: &Controller, pause: Duration) {
    signal(c.child.id(), "-STOP");
    // The stop itself is what is tested: its length is real time.
    tokio::time::sleep(pause).await;
    signal(c.child.id(), "-CONT");
}

/// After a stop: the lag is reported, the transitions after `seq` are
/// none, and every node is still Ready once two monitor passes that began
/// after the stop have finished.
async fn nothing_was_declared(c: &Controller, site: &TestSite, nodes: usize, seq: u64) {
    let resumed = unix_now();
    c.wait_pass_after("nodekeeper_last_monitor_pass_timestamp_seconds", resumed)
        .await;
    let after = unix_now();
    c.wait_pass_after("nodekeeper_last_monitor_pass_timestamp_seconds", after)
        .await;
    assert_none(&transitions_after(c, seq).await);
    all_ready(c, site, nodes).await;
    let lag = c
        .metric("nodekeeper_controller_lag_seconds")
        .await
        .expect("the lag gauge");
    assert!(lag >= (GRACE * 2).as_secs_f64() - 0.5, "lag {lag}");
    let away = c
        .metric("nodekeeper_controller_away_seconds_total")
        .await
        .expect("the time away");
    assert!(away >= lag - 0.001, "away {away}, lag {lag}");
    let ready = c.text("/readyz?verbose").await;
    assert!(
        ready.contains("[-]controller-lag failed: the controller did not run for"),
        "{ready}"
    );
    assert!(c
        .log_text()
        .contains("every grace period is extended by as much"));
}

/// Kubelets push every 200 ms while the controller is stopped for twice
/// the grace period: their requests wait in its sockets, and when it runs
/// again its monitor pass, which may come before it reads them, finds the
/// time it was stopped left out of their silence.
#[tokio::test]
async fn a_controller_stopped_for_twice_the_grace_declares_no_pushing_node_unknown() {
    let nodes = 20;
    let site = TestSite::builder(nodes, Ipv4Addr::new(127, 150, 0, 1))
        .push_mode()
        .grace("2s")
        .start()
        .await;
    let c = site.controller(&[]);
    site.fleet.push_to(&c, |_| {});
    all_ready(&c, &site, nodes).await;
    let seq = last_seq(&c).await;
    pause(&c, GRACE * 2).await;
    nothing_was_declared(&c, &site, nodes, seq).await;
    site.stop().await;
}

/// The same with probes: the probes out when it stopped, and the sweeps
/// after it, find the kubelets healthy before any grace has run out on the
/// controller's clock.
#[tokio::test]
async fn a_controller_stopped_for_twice_the_grace_declares_no_probed_node_unknown() {
    let nodes = 20;
    let site = TestSite::builder(nodes, Ipv4Addr::new(127, 150, 1, 1))
        .grace("2s")
        .start()
        .await;
    let c = site.controller(&[]);
    all_ready(&c, &site, nodes).await;
    let seq = last_seq(&c).await;
    pause(&c, GRACE * 2).await;
    nothing_was_declared(&c, &site, nodes, seq).await;
    site.stop().await;
}

/// Sixteen readers listing every node back to back, each on a connection
/// of its own, for five grace periods: the probe sweeps go on at their
/// period and no healthy node goes Unknown. The nodes carry large labels,
/// so that every list is megabytes and encoding them is work the API does.
#[tokio::test]
async fn readers_listing_back_to_back_never_starve_the_probe_sweep() {
    let nodes = 400;
    let site = TestSite::builder(nodes, Ipv4Addr::new(127, 150, 2, 1))
        .grace("2s")
        .labels(|i| {
            let mut labels = serde_json::Map::new();
            for l in 0..60 {
                labels.insert(
                    format!("example.com/label-{l}"),
                    format!("{i}-{l:0>50}").into(),
                );
            }
            Value::Object(labels)
        })
        .start()
        .await;
    let c = site.controller(&[]);
    all_ready(&c, &site, nodes).await;
    let seq = last_seq(&c).await;
    let sweeps = c
        .metric("nodekeeper_sweep_duration_seconds_count")
        .await
        .unwrap();

    let stop = tokio_util::sync::CancellationToken::new();
    let mut readers = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let url = format!("{}/api/v1/nodes", c.url);
        let stop = stop.clone();
        readers.spawn(async move {
            let client = reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap();
            let mut lists = 0u64;
            while !stop.is_cancelled() {
                if let Ok(r) = client.get(&url).send().await {
                    if r.bytes().await.is_ok() {
                        lists += 1;
                    }
                }
            }
            lists
        });
    }
    let window = GRACE * 5;
    let started = Instant::now();
    // The readers run for the window: real time is what is tested.
    tokio::time::sleep(window).await;
    stop.cancel();
    let mut lists = 0;
    while let Some(done) = readers.join_next().await {
        lists += done.unwrap();
    }
    let elapsed = started.elapsed();
    assert!(lists >= 8, "the readers listed {lists} times");

    // Sweeps every 200 ms went on: at least three quarters of them (a
    // controller serving these readers on its own worker made a third).
    let swept = c
        .metric("nodekeeper_sweep_duration_seconds_count")
        .await
        .unwrap()
        - sweeps;
    let due = elapsed.as_secs_f64() / 0.2;
    eprintln!("{swept} sweeps of {due:.0} due, {lists} lists");
    assert_none(&transitions_after(&c, seq).await);
    assert!(
        swept >= due * 0.75,
        "{swept} sweeps of {due:.0} due, {lists} lists"
    );
    site.stop().await;
}
