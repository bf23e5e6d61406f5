//! The mirror converges whatever the API server loses: restarted empty with
//! resourceVersions starting over, wiped in place, a Node deleted out of
//! band, a watch that expires; it honours 429 Retry-After as throttling, and
//! says when its budget cannot keep the Leases — with the real binary
//! against the in-memory API server.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;
use std::time::Duration;

use tokio::time::Instant;

use common::*;
use nodekeeper_sim::apiserver::{FakeApiServer, Fault, ObjectKey, Request};
use nodekeeper_sim::KubeletState;
use serde_json::Value;

const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

/// A test site with a grace period of 4 s: a loaded machine can delay a
/// probed node's answers past the usual grace, and a node flapping to
/// Unknown and back keeps the state these tests wait for from ever holding
/// at one moment.
async fn site(nodes: usize, base_ip: Ipv4Addr) -> TestSite {
    TestSite::builder(nodes, base_ip).grace("4s").start().await
}

/// Flags pointing a controller at `api`: Leases of `duration` renewed every
/// `renew`, a budget of `qps` (burst as much), no leader election.
fn mirror_flags(
    api: &FakeApiServer,
    duration: &str,
    renew: &str,
    qps: Option<&str>,
) -> Vec<String> {
    let mut flags = vec![
        "--master".to_string(),
        api.url(),
        "--kube-api-timeout".into(),
        "2s".into(),
        "--node-lease-duration".into(),
        duration.into(),
        "--node-lease-renew-interval".into(),
        renew.into(),
        "--leader-elect=false".into(),
    ];
    if let Some(qps) = qps {
        flags.extend(["--kube-api-qps", qps, "--kube-api-burst", qps].map(String::from));
    }
    flags
}

fn ready_of_upstream(api: &FakeApiServer, name: &str) -> Option<String> {
    ready_of(&api.node(name)?)
}

/// Whether the API server has every node as the controller has it: the
/// Node with its Ready status, the unreachable taint exactly on the nodes
/// not Ready, addresses, and a Lease for each Ready node.
fn converged(api: &FakeApiServer, fleet: &TestFleet, n: usize, down: &[usize]) -> bool {
    (0..n).all(|i| {
        let name = fleet.name(i);
        let Some(node) = api.node(&name) else {
            return false;
        };
        let want = if down.contains(&i) { "Unknown" } else { "True" };
        let tainted = taints(&node).contains(&format!("{UNREACHABLE}:NoSchedule"));
        ready_of_upstream(api, &name).as_deref() == Some(want)
            && tainted == down.contains(&i)
            && !node["status"]["addresses"]
                .as_array()
                .is_none_or(Vec::is_empty)
            && (down.contains(&i) || api.lease("kube-node-lease", &name).is_some())
    })
}

/// Per node, what the API server has: Ready status, taints, and whether it
/// has a Lease; for a failure's message.
fn upstream_summary(api: &FakeApiServer, fleet: &TestFleet, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let name = fleet.name(i);
            match api.node(&name) {
                None => format!("{name}: absent"),
                Some(node) => format!(
                    "{name}: Ready={:?} taints={:?} lease={}",
                    ready_of_upstream(api, &name),
                    taints(&node),
                    api.lease("kube-node-lease", &name).is_some()
                ),
            }
        })
        .collect()
}

async fn wait_converged(
    api: &FakeApiServer,
    fleet: &TestFleet,
    n: usize,
    down: &[usize],
    what: &str,
) {
    eventually(what, || {
        let ok = converged(api, fleet, n, down);
        async move { ok }
    })
    .await;
}

/// The mirror's requests (leader election has none here) within any second
/// after `since`: at most the burst plus a second's rate, and a token's slack.
fn assert_within_budget(requests: &[Request], since: Instant, qps: usize) {
    let mut at: Vec<_> = requests
        .iter()
        .filter(|r| r.at >= since)
        .map(|r| r.at)
        .collect();
    at.sort();
    for (i, start) in at.iter().enumerate() {
        let within = at[i..]
            .iter()
            .take_while(|t| **t - *start < Duration::from_secs(1))
            .count();
        assert!(
            within <= 2 * qps + 1,
            "{within} requests within a second (budget {qps}/s, burst {qps})"
        );
    }
}

/// How many full lists of the Nodes the API server has answered.
fn lists(api: &FakeApiServer) -> usize {
    api.requests()
        .iter()
        .filter(|r| r.path == "/api/v1/nodes" && r.method == "GET" && !r.query.contains("watch"))
        .count()
}

async fn mirror_status(c: &Controller) -> Value {
    let (code, status) = c.get("/v1/mirror").await;
    assert_eq!(code, 200, "{status}");
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_restarted_empty_is_repopulated_within_the_budget() {
    let site = site(8, Ipv4Addr::new(127, 87, 1, 1)).await;
    let (fleet, db) = (&site.fleet, &site.db);
    let api = FakeApiServer::start().await;
    let mut args = site.args();
    // Six Ready nodes' Leases every 2s take 3 of the 6 requests a second;
    // recreating the nodes takes the rest for a few seconds.
    args.extend(mirror_flags(&api, "10s", "2s", Some("6")));
    let c = Controller::start(db, &args);
    let down = [0, 1];
    for i in down {
        fleet
            .handle
            .set(&fleet.name(i), KubeletState::Down)
            .unwrap();
    }
    wait_converged(
        &api,
        fleet,
        8,
        &down,
        "every node, status, taint and Lease upstream",
    )
    .await;
    let before: Vec<String> = (0..8)
        .map(|i| api.node(&fleet.name(i)).unwrap()["metadata"]["uid"].to_string())
        .collect();

    // Restored from an empty backup: nothing there, resourceVersions from 1.
    api.clear_requests();
    let restarted = Instant::now();
    api.restart_empty().await;
    // Not checked here that the server is empty: the mirror may already be
    // recreating nodes. That everything was created anew on a server that
    // started over is checked from the server's log once converged.
    // While it lacks nodes, the mirror never claims a clean slate: once it
    // has noticed the restart (the watch broke), a status saying nothing is
    // missing, differing or queued, with the watch open, must find every
    // node there.
    let mut noticed = false;
    let mut saw_missing = false;
    while !converged(&api, fleet, 8, &down) {
        let status = mirror_status(&c).await;
        assert!(
            restarted.elapsed() < DEADLINE,
            "not repopulated: {status}; upstream {:?}; {}",
            upstream_summary(&api, fleet, 8),
            c.log_text()
        );
        let upstream = &status["upstream"];
        let missing = upstream["missing"].as_u64().unwrap_or(0);
        saw_missing |= missing > 0;
        noticed |= missing > 0 || upstream["watching"] == false;
        let clean = status["backlog"] == 0
            && missing == 0
            && upstream["differ"] == 0
            && upstream["watching"] == true;
        if noticed && clean {
            assert_eq!(
                api.nodes().len(),
                8,
                "a clean slate claimed while nodes were missing: {status}"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = restarted.elapsed();
    let requests = api.requests();
    assert!(saw_missing, "the missing nodes were never shown");
    for (i, uid) in before.iter().enumerate() {
        let node = api.node(&fleet.name(i)).unwrap();
        assert_ne!(node["metadata"]["uid"].to_string(), *uid, "created anew");
    }
    // Created anew by creates the server took (it refuses one for a name it
    // has), with resourceVersions counted from nothing: no object's version
    // exceeds the writes the server took since the restart.
    let created = requests
        .iter()
        .filter(|r| r.method == "POST" && r.path == "/api/v1/nodes" && r.status == 201)
        .count();
    assert!(created >= 8, "{created} nodes created");
    let writes = requests
        .iter()
        .filter(|r| r.is_write() && r.status < 300)
        .count() as u64;
    for node in api.nodes() {
        let rv: u64 = node["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(rv <= writes, "resourceVersion {rv} after {writes} writes");
    }
    // Within the budget: never more than the rate and burst in any second,
    // and only the work there was. Each node costs its create and its
    // status; the lists, gets and watches a dozen at most; each Ready node's
    // Lease its create and a renewal every 2 s for as long as it took (a
    // slow machine stretches that, never the Node requests).
    assert_within_budget(&requests, restarted, 6);
    let (leases, nodes): (Vec<&Request>, Vec<&Request>) =
        requests.iter().partition(|r| r.path.contains("/leases"));
    eprintln!(
        "repopulated in {took:?}: {} Node requests, {} Lease requests, {writes} writes",
        nodes.len(),
        leases.len()
    );
    assert!(
        nodes.len() <= 8 * 2 + 12,
        "{} Node requests to repopulate 8 nodes: {nodes:?}",
        nodes.len()
    );
    let rounds = took.as_secs() / 2 + 2;
    assert!(
        leases.len() as u64 <= 6 * (2 + rounds),
        "{} Lease requests in {took:?}",
        leases.len()
    );

    let status = mirror_status(&c).await;
    assert_eq!(status["upstream"]["missing"], 0, "{status}");
    assert_eq!(status["backlog"], 0, "{status}");
    // Converged, the mirror watches again; it may be between a list and the
    // watch that follows it at the moment the last node arrived.
    eventually("the mirror watches the restarted API server", || async {
        mirror_status(&c).await["upstream"]["watching"] == true
    })
    .await;
    let table = cli_ok(db, &["mirror", "status"]);
    assert!(
        table.contains("0 registry nodes missing, 0 differing; watching"),
        "{table}"
    );
    let metrics = c.text("/metrics").await;
    assert!(
        metrics.contains("nodekeeper_mirror_nodes_missing_upstream 0"),
        "{metrics}"
    );
    assert!(c
        .log_text()
        .contains("nodes missing or different on the API server"));
    assert!(c.stop().success());
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_wiped_in_place_and_a_node_deleted_out_of_band_are_repaired() {
    let site = site(4, Ipv4Addr::new(127, 87, 2, 1)).await;
    let (fleet, db) = (&site.fleet, &site.db);
    let api = FakeApiServer::start().await;
    let mut args = site.args();
    // No --kube-api-qps: the budget is sized from the Ready nodes.
    args.extend(mirror_flags(&api, "10s", "2s", None));
    let c = Controller::start(db, &args);
    fleet
        .handle
        .set(&fleet.name(3), KubeletState::Down)
        .unwrap();
    wait_converged(&api, fleet, 4, &[3], "everything upstream").await;
    let status = mirror_status(&c).await;
    assert_eq!(status["budget"]["sized"], true, "{status}");
    assert_eq!(status["budget"]["qps"], 20.0, "{status}");
    assert_eq!(status["upstream"]["watching"], true, "{status}");

    // `kubectl delete node` on the cluster: back within seconds, as a
    // kubelet re-registers.
    let victim = fleet.name(1);
    let uid = api.node(&victim).unwrap()["metadata"]["uid"].clone();
    let deleted = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .delete(format!("{}/api/v1/nodes/{victim}", api.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    let lists_before = lists(&api);
    wait_converged(&api, fleet, 4, &[3], "the deleted node recreated").await;
    assert_ne!(api.node(&victim).unwrap()["metadata"]["uid"], uid);
    // Repaired from the watch, as soon as it was heard of: not by the full
    // list the resync period would bring half an hour later.
    assert_eq!(lists(&api), lists_before, "repaired by a list");
    assert_eq!(mirror_status(&c).await["upstream"]["watching"], true);

    // Every object deleted in place, the server still running. (Not checked
    // right after the wipe that the server is empty: the mirror may already
    // be recreating objects. Each one having a new uid says it went.)
    let uids = |api: &FakeApiServer| -> Vec<Value> {
        (0..4)
            .map(|i| api.node(&fleet.name(i)).unwrap()["metadata"]["uid"].clone())
            .chain((0..3).map(|i| {
                api.lease("kube-node-lease", &fleet.name(i)).unwrap()["metadata"]["uid"].clone()
            }))
            .collect()
    };
    let before_wipe = uids(&api);
    let lists_before = lists(&api);
    api.wipe();
    wait_converged(&api, fleet, 4, &[3], "repopulated after a wipe").await;
    for (old, new) in before_wipe.iter().zip(uids(&api)) {
        assert_ne!(*old, new, "created anew after the wipe");
    }
    assert_eq!(lists(&api), lists_before, "repaired by a list");

    // Someone removes the taint nodekeeper manages: put back.
    let down = fleet.name(3);
    let mut node = api.node(&down).unwrap();
    node["spec"]["taints"] = serde_json::json!([]);
    api.put_node(node);
    wait_converged(&api, fleet, 4, &[3], "the managed taint restored").await;
    assert!(c.stop().success());
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_that_expires_is_replaced_by_a_list() {
    let site = site(3, Ipv4Addr::new(127, 87, 3, 1)).await;
    let (fleet, db) = (&site.fleet, &site.db);
    let api = FakeApiServer::start().await;
    let mut args = site.args();
    args.extend(mirror_flags(&api, "10s", "2s", None));
    let c = Controller::start(db, &args);
    wait_converged(&api, fleet, 3, &[], "everything upstream").await;
    eventually("the watch open", || {
        let open = api.watches() > 0;
        async move { open }
    })
    .await;

    // The watch hears nothing (a half-open connection) while a node goes;
    // then the history is compacted: the watch ends with 410 Gone, and
    // only a new list can tell what was missed.
    api.stall_watches(true);
    let victim = fleet.name(2);
    api.remove(&ObjectKey::node(&victim));
    let lists_before = api
        .requests()
        .iter()
        .filter(|r| r.path == "/api/v1/nodes" && !r.query.contains("watch"))
        .count();
    api.compact();
    api.stall_watches(false);
    wait_converged(
        &api,
        fleet,
        3,
        &[],
        "the node missed by the watch recreated",
    )
    .await;
    let lists_after = api
        .requests()
        .iter()
        .filter(|r| r.path == "/api/v1/nodes" && !r.query.contains("watch"))
        .count();
    assert!(lists_after > lists_before, "relisted");
    assert!(c.stop().success());
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_is_waited_out_and_shown_as_throttling_not_as_an_error() {
    let site = site(3, Ipv4Addr::new(127, 87, 4, 1)).await;
    let (fleet, db) = (&site.fleet, &site.db);
    let api = FakeApiServer::start().await;
    let mut args = site.args();
    args.extend(mirror_flags(&api, "4s", "1s", Some("50")));
    let c = Controller::start(db, &args);
    wait_converged(&api, fleet, 3, &[], "everything upstream").await;

    // API Priority and Fairness rejects everything for a while, asking for
    // 10 s between tries; a node goes down meanwhile.
    let victim = fleet.name(0);
    api.clear_requests();
    api.set_fault(Fault::Throttled(10));
    fleet.handle.set(&victim, KubeletState::Down).unwrap();
    c.wait_ready(&victim, "Unknown").await;
    let status = c
        .wait_for("/v1/mirror", "throttling seen", |s| {
            s["throttled"].as_u64() >= Some(1)
        })
        .await;
    // Throttled long enough to be tried again at least once.
    tokio::time::sleep(Duration::from_secs(11)).await;
    api.set_fault(Fault::None);
    wait_converged(
        &api,
        fleet,
        3,
        &[0],
        "the change through once the throttling ends",
    )
    .await;

    // After each 429, nothing for the Retry-After (10 s), bar requests already
    // on their way when it was answered: those were sent before it, so only a
    // machine stalled for 5 s could bring one in after the first half of it,
    // while a client that did not wait would send its next try within it.
    let requests = api.requests();
    let throttled: Vec<Instant> = requests
        .iter()
        .filter(|r| r.status == 429)
        .map(|r| r.at)
        .collect();
    assert!(!throttled.is_empty());
    for t in &throttled {
        let early: Vec<&Request> = requests
            .iter()
            .filter(|r| {
                r.at > *t + Duration::from_secs(5) && r.at < *t + Duration::from_millis(9500)
            })
            .collect();
        assert!(early.is_empty(), "requests inside a Retry-After: {early:?}");
    }
    let status_now = mirror_status(&c).await;
    assert!(status_now["throttled"].as_u64().unwrap() >= throttled.len() as u64);
    assert_eq!(
        status_now["lastThrottled"]["retryAfterSeconds"], 10.0,
        "{status_now}"
    );
    for s in [&status, &status_now] {
        let error = s["lastError"]["message"].as_str().unwrap_or("");
        assert!(
            !error.contains("429") && !error.contains("Too many"),
            "an error: {s}"
        );
    }
    assert_eq!(
        status_now["retries"], status["retries"],
        "no retries counted: {status_now}"
    );
    let table = cli_ok(db, &["mirror", "status"]);
    assert!(table.contains("answers 429, the last"), "{table}");
    let metrics = c.text("/metrics").await;
    assert!(
        !metrics.contains("nodekeeper_mirror_throttled_total 0"),
        "{metrics}"
    );
    assert!(c.stop().success());
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_too_small_for_the_leases_is_reported_as_the_ready_count_changes() {
    let site = site(8, Ipv4Addr::new(127, 87, 5, 1)).await;
    let (fleet, db) = (&site.fleet, &site.db);
    let api = FakeApiServer::start().await;
    let mut args = site.args();
    // Eight Ready nodes renewed every second need 8 requests/s, 10 with a
    // fifth to spare: 5 is not enough; three are.
    args.extend(mirror_flags(&api, "3s", "1s", Some("5")));
    let c = Controller::start(db, &args);
    let status = c
        .wait_for("/v1/mirror", "the budget short", |s| {
            s["budget"]["enough"] == false
        })
        .await;
    let budget = &status["budget"];
    assert_eq!(budget["readyNodes"], 8, "{status}");
    assert_eq!(budget["leaseQps"], 8.0, "{status}");
    assert_eq!(budget["sized"], false, "{status}");
    let why = budget["shortfall"].as_str().unwrap();
    assert!(
        why.contains("--kube-api-qps must be at least 10 (it is 5)"),
        "{why}"
    );
    assert!(
        c.log_text().contains("--kube-api-qps must be at least 10"),
        "{}",
        c.log_text()
    );
    let metrics = c.text("/metrics").await;
    assert!(
        metrics.contains("nodekeeper_mirror_budget_sufficient 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("nodekeeper_mirror_lease_qps_needed 8.0"),
        "{metrics}"
    );
    let table = cli_ok(db, &["mirror", "status"]);
    assert!(
        table.contains("NOT ENOUGH: renewing the Leases of 8 Ready nodes every 1s"),
        "{table}"
    );
    let (code, readyz) = c.get("/readyz?verbose").await;
    assert_eq!(code, 500, "{readyz}");
    assert!(
        readyz
            .as_str()
            .unwrap()
            .contains("--kube-api-qps must be at least 10"),
        "{readyz}"
    );

    // Five nodes go down: three Leases fit.
    for i in 0..5 {
        fleet
            .handle
            .set(&fleet.name(i), KubeletState::Down)
            .unwrap();
    }
    let status = c
        // Enough already at four Ready nodes: wait for all five to be down.
        .wait_for("/v1/mirror", "the budget enough again", |s| {
            s["budget"]["enough"] == true && s["budget"]["readyNodes"] == 3
        })
        .await;
    assert_eq!(status["budget"]["readyNodes"], 3, "{status}");
    let metrics = c.text("/metrics").await;
    assert!(
        metrics.contains("nodekeeper_mirror_budget_sufficient 1"),
        "{metrics}"
    );
    assert!(c
        .log_text()
        .contains("covers every Ready node's Lease again"));
    let (code, readyz) = c.get("/readyz?verbose").await;
    assert!(
        readyz.as_str().unwrap().contains("[+]mirror ok"),
        "{code} {readyz}"
    );
    assert!(c.stop().success());
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_lease_mirroring_no_lease_is_written() {
    let site = site(2, Ipv4Addr::new(127, 87, 6, 1)).await;
    let (fleet, dir, db) = (&site.fleet, site.dir.path(), &site.db);
    let api = FakeApiServer::start().await;
    let mut args = site.args();
    // Leases of 1 s would be renewed every 333 ms if they were mirrored.
    args.extend(
        [
            "--master",
            &api.url(),
            "--leader-elect=false",
            "--mirror-leases=false",
            "--node-lease-duration",
            "1s",
        ]
        .map(String::from),
    );
    let c = Controller::start(db, &args);
    eventually("both nodes Ready upstream", || {
        let ok = (0..2).all(|i| ready_of_upstream(&api, &fleet.name(i)).as_deref() == Some("True"));
        async move { ok }
    })
    .await;
    // Instead of waiting a while: a change that reaches the API server a
    // grace period (4 s, a dozen renewal intervals) later, through the same
    // queue in which a Ready node's Lease renewals go first. Had node 1's
    // Lease been mirrored, it would be there by then.
    fleet
        .handle
        .set(&fleet.name(0), KubeletState::Down)
        .unwrap();
    eventually("node 0 Unknown upstream", || {
        let ok = ready_of_upstream(&api, &fleet.name(0)).as_deref() == Some("Unknown");
        async move { ok }
    })
    .await;
    assert_eq!(
        ready_of_upstream(&api, &fleet.name(1)).as_deref(),
        Some("True")
    );
    assert!(api.leases().is_empty(), "{:?}", api.leases());
    assert!(
        !api.requests()
            .iter()
            .any(|r| r.path.contains("/leases/") || r.path.ends_with("/leases")),
        "no Lease request"
    );
    let status = mirror_status(&c).await;
    assert_eq!(status["budget"]["leases"], false, "{status}");
    assert_eq!(status["budget"]["enough"], true, "{status}");
    assert!(c.stop().success());

    // Both flags at once make no sense.
    let (code, _, stderr) = cli(
        &dir.join("other"),
        &[
            "run",
            "--nodes",
            "127.87.6.200",
            "--kubelet-scheme",
            "http",
            "--listen",
            "127.0.0.1:0",
            "--master",
            "http://127.0.0.1:1",
            "--mirror-leases=false",
            "--node-lease-renew-interval",
            "5s",
        ],
    );
    assert_ne!(code, 0);
    assert!(stderr.contains("--node-lease-renew-interval"), "{stderr}");
    site.stop().await;
}
