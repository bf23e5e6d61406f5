//! `--transition-hook-mode batch` against the real binary: a site-wide
//! burst of 2,000 transitions reaches a slow hook (1 s a run) in a few runs,
//! each transition once and in seq order, as JSON lines on its stdin.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use futures_util::StreamExt;
use serde_json::{json, Value};

const NODES: usize = 1000;

/// Ready=True from `node`, once.
async fn post_ready(c: &Controller, node: &str) {
    let body = json!({"status": {"conditions": [{"type": "Ready", "status": "True",
        "reason": "KubeletReady", "message": "kubelet is posting ready status"}]}});
    let (code, answer) = c.status_patch(node, &body).send().await;
    assert_eq!(code, 200, "{node}: {answer}");
}

/// Every `(count, first seq, last seq, arguments)` the hook recorded.
fn runs(dir: &Path) -> Vec<[u64; 4]> {
    std::fs::read_to_string(dir.join("runs"))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let n: Vec<u64> = l.split(' ').map(|n| n.parse().unwrap()).collect();
            [n[0], n[1], n[2], n[3]]
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_wide_burst_reaches_a_slow_batch_hook_in_a_few_runs() {
    let names: Vec<String> = (0..NODES).map(|i| format!("edge-{i:04}")).collect();
    let site = TestSite::named(&names, Ipv4Addr::new(127, 159, 0, 1)).start();
    let dir = site.path();
    // Held while `block` exists; then a second a run, recording what it got.
    let d = dir.display();
    let hook = format!(
        "while [ -e {d}/block ]; do sleep 0.05; done; sleep 1; cat >> {d}/events; \
         echo \"$NODEKEEPER_COUNT $NODEKEEPER_FIRST_SEQ $NODEKEEPER_LAST_SEQ $#\" >> {d}/runs"
    );
    std::fs::write(dir.join("block"), "").unwrap();
    let c = site.controller_with(&[
        "--transition-hook",
        &hook,
        "--transition-hook-mode",
        "batch",
        // The held run must not time out while the burst is made.
        "--transition-hook-timeout",
        "5m",
    ]);
    c.wait_for("/api/v1/nodes", "every node registered", |list| {
        list["items"]
            .as_array()
            .is_some_and(|items| items.len() == NODES)
    })
    .await;

    // Every node posts Ready once (Unknown -> True), then falls silent
    // (True -> Unknown after the grace): 2,000 transitions while the hook
    // is held in its first run.
    futures_util::stream::iter(&names)
        .for_each_concurrent(8, |node| post_ready(&c, node))
        .await;
    let seen = &c;
    eventually("every node went Ready and then Unknown", || async move {
        let metrics = seen.text("/metrics").await;
        [
            "nodekeeper_condition_transitions_total{condition=\"Ready\",status=\"True\"} 1000",
            "nodekeeper_condition_transitions_total{condition=\"Ready\",status=\"Unknown\"} 1000",
        ]
        .iter()
        .all(|want| metrics.contains(want))
    })
    .await;
    let history: Value = json(&cli_ok(&site.db, &["history", "-o", "json"]));
    let want: Vec<u64> = history
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "ConditionChanged")
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(want.len(), 2 * NODES);

    // Let go, the whole backlog takes the held run and at most two more
    // (1,000 transitions a run): a few seconds, where one transition a run
    // would take 2,000 runs, over half an hour.
    let released = Instant::now();
    std::fs::remove_file(dir.join("block")).unwrap();
    let last = *want.last().unwrap() as f64;
    eventually("the hook is done with the last transition", || async move {
        seen.metric("nodekeeper_transition_hook_last_seq").await >= Some(last)
    })
    .await;
    let took = released.elapsed();

    let got: Vec<u64> = std::fs::read_to_string(dir.join("events"))
        .unwrap()
        .lines()
        .map(|l| json(l)["seq"].as_u64().unwrap())
        .collect();
    let differ = got.iter().zip(&want).position(|(g, w)| g != w);
    assert!(
        got.len() == want.len() && differ.is_none(),
        "each transition once, in seq order: got {} of {}, first difference at {differ:?}",
        got.len(),
        want.len()
    );
    let runs = runs(dir);
    assert!(runs.len() <= 3, "{} runs: {runs:?}", runs.len());
    let mut next = 0;
    for &[count, first, last, args] in &runs {
        assert!(count <= 1000, "{runs:?}");
        assert_eq!(args, 0, "no arguments in a batch run");
        assert_eq!((first, last), (want[next], want[next + count as usize - 1]));
        next += count as usize;
    }
    assert!(took < Duration::from_secs(30), "took {took:?}");
    eprintln!(
        "{} transitions in {} runs of a 1 s hook, {took:?} after the hook was let go",
        want.len(),
        runs.len()
    );
    assert!(c.stop().success());
}
