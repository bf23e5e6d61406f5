//! The mirror against a fake API server with real semantics: nodes adopted
//! or created, status, taints and Leases kept current, deleted nodes and
//! their pods removed; an outage and a restart in the middle of it lose
//! nothing and the backlog drains within the budget; pod eviction re-checks
//! before it acts; two controllers never write at once.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;
use std::time::Duration;

use common::*;
use nodekeeper_sim::apiserver::{FakeApiServer, Fault, ObjectKey};
use nodekeeper_sim::KubeletState;
use serde_json::{json, Value};

const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

/// Pods are deleted from nodes not Ready for a second, ten nodes a second.
const DELETE_PODS_AFTER_A_SECOND: [&str; 6] = [
    "--eviction-mode",
    "delete-pods",
    "--pod-eviction-timeout",
    "1s",
    "--node-eviction-rate",
    "10",
];

/// The flags that point a controller at `api`, with fast periods.
fn mirror_args(api: &FakeApiServer) -> Vec<String> {
    mirror_args_renewing(api, "500ms")
}

fn mirror_args_renewing(api: &FakeApiServer, renew: &str) -> Vec<String> {
    [
        "--master",
        &api.url(),
        "--kube-api-timeout",
        "2s",
        "--node-lease-duration",
        "4s",
        "--node-lease-renew-interval",
        renew,
        "--leader-elect-lease-duration",
        "2s",
        "--leader-elect-renew-deadline",
        "1s",
        "--leader-elect-retry-period",
        "200ms",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn inventory(fleet: &TestFleet, nodes: &[usize]) -> String {
    let mut text = String::from("machines:\n");
    for i in nodes {
        let n = &fleet.fleet.nodes()[*i];
        text.push_str(&format!(
            "  - name: {}\n    address: {}\n    zone: rack-a\n",
            n.name,
            n.address.ip()
        ));
    }
    text
}

fn write(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn condition<'a>(node: &'a Value, kind: &str) -> &'a Value {
    node["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

fn upstream_ready(api: &FakeApiServer, name: &str) -> Option<String> {
    ready_of(&api.node(name)?)
}

fn pod(namespace: &str, name: &str, node: &str) -> Value {
    json!({
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}
    })
}

/// Waits until `check` holds for the fake API server's state.
async fn upstream(what: &str, check: impl Fn() -> bool) {
    eventually(what, || {
        let ok = check();
        async move { ok }
    })
    .await;
}

/// Pod deletions asked of the API server.
fn pod_deletes(api: &FakeApiServer) -> Vec<String> {
    api.requests()
        .into_iter()
        .filter(|r| r.method == "DELETE" && r.path.contains("/pods/"))
        .map(|r| r.path)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_status_taints_and_leases_reach_the_api_server() {
    let site = TestSite::builder(3, Ipv4Addr::new(127, 141, 0, 1))
        .without_nodes_file()
        .start()
        .await;
    let api = FakeApiServer::start().await;
    let (fleet, dir, db) = (&site.fleet, &site.dir, &site.db);
    let machines = dir.path().join("site.yaml");
    write(&machines, &inventory(fleet, &[0, 1, 2]));
    let (a, b, c_) = (fleet.name(0), fleet.name(1), fleet.name(2));
    // Someone registered node a already, with their own label and taint.
    api.put_node(json!({
        "metadata": {"name": a, "labels": {"team": "edge"}},
        "spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}
    }));
    api.put_pod(pod("default", "web-c", &c_));
    let mut args = site.args();
    args.extend(["--cloud-provider", "inventory", "--cloud-config"].map(String::from));
    args.push(machines.display().to_string());
    args.extend(mirror_args(&api));
    let c = Controller::start(db, &args);

    upstream("every node Ready and untainted on the API server", || {
        [&a, &b, &c_].iter().all(|n| {
            upstream_ready(&api, n).as_deref() == Some("True")
                && api
                    .node(n)
                    .is_some_and(|node| !taints(&node).iter().any(|t| t.starts_with(UNREACHABLE)))
        })
    })
    .await;
    // Adopted, not duplicated: their label and taint stay, ours are added.
    let adopted = api.node(&a).unwrap();
    assert_eq!(api.nodes().len(), 3);
    assert_eq!(adopted["metadata"]["labels"]["team"], "edge");
    assert_eq!(
        adopted["metadata"]["labels"]["kubernetes.io/hostname"],
        a.as_str()
    );
    assert_eq!(
        adopted["metadata"]["annotations"]["nodekeeper.io/source"],
        "cloud/inventory"
    );
    assert_eq!(taints(&adopted), ["dedicated:NoSchedule"]);
    assert_eq!(adopted["spec"]["providerID"], format!("inventory://{a}"));
    let ready = condition(&adopted, "Ready");
    assert_eq!(ready["reason"], "KubeletReady");
    assert_eq!(adopted["status"]["addresses"][0]["address"], "127.141.0.1");

    // Every Ready node's Lease is renewed, by the node's name.
    let renewed = |n: &str| {
        api.lease("kube-node-lease", n)
            .map(|l| l["spec"]["renewTime"].clone())
    };
    upstream("a Lease for b", || renewed(&b).is_some()).await;
    let first = renewed(&b).unwrap();
    upstream("b's Lease renewed again", || {
        renewed(&b).is_some_and(|t| t != first)
    })
    .await;
    let lease = api.lease("kube-node-lease", &b).unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], b.as_str());
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 4);

    // A node goes down: Unknown and tainted on the API server too, even
    // through conflicting writes by someone else; its Lease stops.
    api.conflict_next(ObjectKey::node(&b), 2);
    fleet.handle.set(&b, KubeletState::Down).unwrap();
    upstream("b Unknown and tainted upstream", || {
        api.node(&b).is_some_and(|n| {
            condition(&n, "Ready")["reason"] == "NodeStatusUnknown"
                && taints(&n) == [format!("{UNREACHABLE}:NoSchedule")]
        })
    })
    .await;
    let stopped = renewed(&b);
    // Back up: Ready and untainted.
    fleet.handle.set(&b, KubeletState::Up).unwrap();
    upstream("b Ready and untainted upstream", || {
        api.node(&b).is_some_and(|n| {
            upstream_ready(&api, &b).as_deref() == Some("True") && taints(&n).is_empty()
        })
    })
    .await;
    upstream("b's renewals resume", || renewed(&b) != stopped).await;

    // A machine leaves the inventory: its node, Lease and pods go.
    write(&machines, &inventory(fleet, &[0, 1]));
    upstream("c deleted upstream with its Lease and pods", || {
        api.node(&c_).is_none()
            && api.lease("kube-node-lease", &c_).is_none()
            && api.pods().is_empty()
    })
    .await;

    // The eviction's entry leaves the outbox once its outcome is recorded,
    // which comes just after the pods are gone upstream.
    eventually("the outbox drained after c's eviction", || {
        let status = json(&cli_ok(db, &["mirror", "status", "-o", "json"]));
        async move { status["backlog"] == 0 }
    })
    .await;
    let status = json(&cli_ok(db, &["mirror", "status", "-o", "json"]));
    assert_eq!(status["running"], true);
    assert_eq!(status["leader"], true);
    assert_eq!(status["backlog"], 0, "{status}");
    assert!(status["requests"].as_u64().unwrap() > 0);
    let table = cli_ok(db, &["mirror", "status"]);
    assert!(
        table.contains("Backlog:") && table.contains("0 entries"),
        "{table}"
    );
    let metrics = c.text("/metrics").await;
    assert!(metrics.contains("nodekeeper_mirror_backlog 0"), "{metrics}");
    assert!(metrics.contains("nodekeeper_mirror_leader 1"), "{metrics}");
    assert!(c.stop().success());
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_and_a_restart_lose_nothing_and_the_backlog_drains_within_budget() {
    let site = TestSite::start(8, Ipv4Addr::new(127, 142, 0, 1)).await;
    let (fleet, db) = (&site.fleet, &site.db);
    let api = FakeApiServer::start().await;
    let mut args = site.args();
    // Eight Leases every 2s take 4 of the 5 requests a second.
    args.extend(mirror_args_renewing(&api, "2s"));
    args.extend(["--kube-api-qps", "5", "--kube-api-burst", "5"].map(String::from));
    // Pods are deleted from nodes that stay down for a second: the outage
    // and its end must not cost a pod of any other node.
    args.extend(DELETE_PODS_AFTER_A_SECOND.map(String::from));
    let names: Vec<String> = (0..8).map(|i| fleet.name(i)).collect();
    for (i, n) in names.iter().enumerate() {
        api.put_pod(pod("default", &format!("web-{i}"), n));
    }
    let c = Controller::start(db, &args);
    upstream("every node Ready upstream", || {
        names
            .iter()
            .all(|n| upstream_ready(&api, n).as_deref() == Some("True"))
    })
    .await;

    // The API server goes away; three nodes go down meanwhile.
    api.set_fault(Fault::Down);
    api.settled().await;
    for n in &names[..3] {
        fleet.handle.set(n, KubeletState::Down).unwrap();
    }
    for n in &names[..3] {
        c.wait_ready(n, "Unknown").await;
    }
    let status = c
        .wait_for("/v1/mirror", "a backlog and an error", |s| {
            s["backlog"].as_u64() >= Some(3) && !s["lastError"].is_null()
        })
        .await;
    assert!(!status["lastError"]["message"].as_str().unwrap().is_empty());

    // The controller is killed in the middle of the outage.
    c.kill9();
    let stopped = json(&cli_ok(db, &["mirror", "status", "-o", "json"]));
    assert_eq!(stopped["running"], false);
    assert!(stopped["backlog"].as_u64().unwrap() >= 3, "{stopped}");
    let c = Controller::start(db, &args);
    let status = c
        .wait_for("/v1/mirror", "the mirror's status", |s| {
            s["running"] == true
        })
        .await;
    assert!(
        status["backlog"].as_u64().unwrap() >= 3,
        "the outbox survived: {status}"
    );

    // The API server returns: the backlog drains, within the budget.
    api.clear_requests();
    api.set_fault(Fault::None);
    api.settled().await;
    upstream("the three nodes Unknown upstream", || {
        names[..3]
            .iter()
            .all(|n| upstream_ready(&api, n).as_deref() == Some("Unknown"))
    })
    .await;
    c.wait_for("/v1/mirror", "an empty backlog", |s| s["backlog"] == 0)
        .await;
    for n in &names[3..] {
        assert_eq!(upstream_ready(&api, n).as_deref(), Some("True"), "{n}");
    }
    // Only the pods of the nodes that stayed down went.
    let mut deleted = pod_deletes(&api);
    deleted.sort();
    assert_eq!(
        deleted,
        (0..3)
            .map(|i| format!("/api/v1/namespaces/default/pods/web-{i}"))
            .collect::<Vec<_>>()
    );
    for i in 3..8 {
        let p = api.pod("default", &format!("web-{i}")).unwrap();
        assert!(p["metadata"]["deletionTimestamp"].is_null(), "{p}");
    }
    // Leader election has its own pace; everything else shares the budget:
    // 5 at once, then 5 a second.
    let mut budgeted: Vec<_> = api
        .requests()
        .into_iter()
        .filter(|r| !r.path.contains("/namespaces/kube-system/"))
        .map(|r| r.at)
        .collect();
    budgeted.sort();
    assert!(budgeted.len() > 5, "{budgeted:?}");
    for (i, start) in budgeted.iter().enumerate() {
        let within = budgeted[i..]
            .iter()
            .take_while(|t| **t - *start < Duration::from_secs(1))
            .count();
        assert!(within <= 11, "{within} requests within a second");
    }
    assert!(c.stop().success());
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_eviction_deletes_pods_only_of_nodes_still_down() {
    let site = TestSite::start(4, Ipv4Addr::new(127, 143, 0, 1)).await;
    let (fleet, db) = (&site.fleet, &site.db);
    let api = FakeApiServer::start().await;
    let (down, back) = (fleet.name(0), fleet.name(1));
    for i in 0..4 {
        let n = fleet.name(i);
        api.put_pod(pod("default", &format!("web-{i}"), &n));
        api.put_pod(pod("shop", &format!("db-{i}"), &n));
    }
    let mut daemon = pod("kube-system", "agent-0", &down);
    daemon["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "u"}]);
    api.put_pod(daemon);
    let mut args = site.args();
    args.extend(mirror_args(&api));
    args.extend(DELETE_PODS_AFTER_A_SECOND.map(String::from));
    let c = Controller::start(db, &args);
    for i in 0..4 {
        c.wait_ready(&fleet.name(i), "True").await;
    }

    // A node that stays down loses its pods, all but the DaemonSet's.
    fleet.handle.set(&down, KubeletState::Down).unwrap();
    let done = c.wait_event(&down, "EvictionDone").await;
    assert_eq!(
        done["result"], "deleted 2 pods (1 DaemonSet or static pods kept)",
        "{done}"
    );
    for name in ["web-0", "db-0"] {
        let ns = if name == "web-0" { "default" } else { "shop" };
        let p = api
            .pod(ns, name)
            .expect("graceful: terminating until the kubelet confirms");
        assert!(!p["metadata"]["deletionTimestamp"].is_null(), "{p}");
    }
    assert!(api.pod("kube-system", "agent-0").unwrap()["metadata"]["deletionTimestamp"].is_null());

    // The decision for another node is made while the API server is away;
    // the node recovers before it returns: its pods are spared.
    api.set_fault(Fault::Down);
    api.settled().await;
    fleet.handle.set(&back, KubeletState::Down).unwrap();
    c.wait_event(&back, "EvictionStarted").await;
    fleet.handle.set(&back, KubeletState::Up).unwrap();
    c.wait_ready(&back, "True").await;
    api.set_fault(Fault::None);
    api.settled().await;
    let done = c.wait_event(&back, "EvictionDone").await;
    assert_eq!(done["result"], "not carried out: the node is Ready again");
    for i in 1..4 {
        let p = api.pod("default", &format!("web-{i}")).unwrap();
        assert!(p["metadata"]["deletionTimestamp"].is_null(), "{p}");
    }
    assert_eq!(pod_deletes(&api).len(), 2, "{:?}", pod_deletes(&api));
    assert!(c.stop().success());
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_pod_eviction_resumes_after_a_restart_only_for_a_node_still_down() {
    let site = TestSite::start(3, Ipv4Addr::new(127, 145, 0, 1)).await;
    let (fleet, db) = (&site.fleet, &site.db);
    let api = FakeApiServer::start().await;
    let (stays, recovers) = (fleet.name(0), fleet.name(1));
    api.put_pod(pod("default", "web-0", &stays));
    api.put_pod(pod("default", "web-1", &recovers));
    let mut args = site.args();
    args.extend(mirror_args(&api));
    args.extend(DELETE_PODS_AFTER_A_SECOND.map(String::from));
    let c = Controller::start(db, &args);
    for i in 0..3 {
        c.wait_ready(&fleet.name(i), "True").await;
    }
    // Both evictions are decided while the API server is away; then the
    // controller dies and one node recovers while it is down.
    api.set_fault(Fault::Down);
    api.settled().await;
    fleet.handle.set(&stays, KubeletState::Down).unwrap();
    fleet.handle.set(&recovers, KubeletState::Down).unwrap();
    for n in [&stays, &recovers] {
        c.wait_event(n, "EvictionStarted").await;
    }
    c.kill9();
    fleet.handle.set(&recovers, KubeletState::Up).unwrap();
    api.set_fault(Fault::None);
    api.settled().await;
    let c = Controller::start(db, &args);
    c.wait_for(
        &format!("/v1/history?node={stays}"),
        "the eviction resumed",
        |h| {
            h.as_array().unwrap().iter().any(|e| {
                e["kind"] == "EvictionDone"
                    && e["result"] == "deleted 1 pods (0 DaemonSet or static pods kept)"
            })
        },
    )
    .await;
    c.wait_for(
        &format!("/v1/history?node={recovers}"),
        "the eviction dropped",
        |h| {
            h.as_array().unwrap().iter().any(|e| {
                e["kind"] == "EvictionDone"
                    && e["result"] == "not carried out: the node is Ready again"
            })
        },
    )
    .await;
    assert!(api.pod("default", "web-1").unwrap()["metadata"]["deletionTimestamp"].is_null());
    assert!(!api.pod("default", "web-0").unwrap()["metadata"]["deletionTimestamp"].is_null());
    assert!(c.stop().success());
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_controllers_never_write_at_once_and_the_standby_takes_over() {
    let site = TestSite::start(2, Ipv4Addr::new(127, 144, 0, 1)).await;
    let api = FakeApiServer::start().await;
    let (fleet, dir) = (&site.fleet, &site.dir);
    let mut args = site.args();
    args.extend(mirror_args(&api));
    let first = Controller::start(&dir.path().join("db1"), &args);
    first
        .wait_for("/v1/mirror", "the first leads", |s| s["leader"] == true)
        .await;
    let second = Controller::start(&dir.path().join("db2"), &args);
    second.wait_ready(&fleet.name(0), "True").await;
    let (_, standby) = second.get("/v1/mirror").await;
    assert_eq!(standby["leader"], false, "{standby}");
    assert_eq!(
        standby["requests"], 0,
        "a standby writes nothing: {standby}"
    );
    let holder = |api: &FakeApiServer| {
        api.lease("kube-system", "nodekeeper").unwrap()["spec"]["holderIdentity"].clone()
    };
    let (_, leading) = first.get("/v1/mirror").await;
    assert_eq!(holder(&api), leading["identity"]);

    // The leader dies without giving the Lease up: the standby takes over
    // once the lease duration has passed, and the nodes stay mirrored.
    first.kill9();
    second
        .wait_for("/v1/mirror", "the standby leads", |s| s["leader"] == true)
        .await;
    let (_, now_leading) = second.get("/v1/mirror").await;
    assert_eq!(holder(&api), now_leading["identity"]);
    fleet
        .handle
        .set(&fleet.name(1), KubeletState::Down)
        .unwrap();
    upstream("the new leader mirrors", || {
        upstream_ready(&api, &fleet.name(1)).as_deref() == Some("Unknown")
    })
    .await;
    // A clean stop gives the Lease up.
    assert!(second.stop().success());
    assert!(holder(&api).is_null(), "released");
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_reaches_the_api_server_and_bad_mirror_flags_are_refused() {
    let site = TestSite::start(1, Ipv4Addr::new(127, 146, 0, 1)).await;
    let api = FakeApiServer::start().await;
    let (fleet, dir) = (&site.fleet, &site.dir);
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: site\n\
             clusters: [{{name: site, cluster: {{server: '{}'}}}}]\n\
             users: [{{name: nodekeeper, user: {{token: s3cret}}}}]\n\
             contexts: [{{name: site, context: {{cluster: site, user: nodekeeper}}}}]\n",
            api.url()
        ),
    )
    .unwrap();
    let mut args = site.args();
    args.extend([
        "--kubeconfig".to_string(),
        kubeconfig.display().to_string(),
        "--leader-elect=false".to_string(),
    ]);
    let c = Controller::start(&dir.path().join("db"), &args);
    upstream("the node on the API server", || {
        upstream_ready(&api, &fleet.name(0)).as_deref() == Some("True")
    })
    .await;
    // Without election it writes from the start, and takes no leader Lease.
    assert!(api.lease("kube-system", "nodekeeper").is_none());
    let (_, status) = c.get("/v1/mirror").await;
    assert_eq!(status["leader"], true, "{status}");
    assert!(c.stop().success());

    let db = dir.path().join("refused");
    for (flags, says) in [
        (
            vec!["--eviction-mode", "delete-pods"],
            "give --kubeconfig or --master",
        ),
        (vec!["--master", "localhost:6443"], "https://HOST:PORT"),
        (
            vec!["--master", "http://127.0.0.1:1", "--kube-api-qps", "0"],
            "--kube-api-qps",
        ),
        (
            vec!["--kubeconfig", "/nonexistent/kubeconfig"],
            "cannot read the kubeconfig /nonexistent/kubeconfig",
        ),
        (
            vec![
                "--master",
                "http://127.0.0.1:1",
                "--leader-elect-lease-duration",
                "5s",
                "--leader-elect-renew-deadline",
                "10s",
            ],
            "must be longer than --leader-elect-renew-deadline",
        ),
    ] {
        let mut all = vec![
            "run",
            "--nodes",
            "10.0.0.1",
            "--kubelet-scheme",
            "http",
            "--listen",
            "127.0.0.1:0",
        ];
        all.extend(flags.iter().copied());
        let (code, _, stderr) = cli(&db, &all);
        assert_ne!(code, 0, "{flags:?} was accepted");
        assert!(stderr.contains(says), "{flags:?}: {stderr}");
    }
    // Nothing was stored by a refused start.
    assert!(!db.exists());
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_and_slow_answers_are_retried_until_they_pass() {
    let site = TestSite::start(2, Ipv4Addr::new(127, 147, 0, 1)).await;
    let api = FakeApiServer::start().await;
    let (fleet, dir) = (&site.fleet, &site.dir);
    let mut args = site.args();
    args.extend(mirror_args(&api));
    args.push("--leader-elect=false".into());
    let c = Controller::start(&dir.path().join("db"), &args);
    let victim = fleet.name(1);
    upstream("both nodes Ready upstream", || {
        (0..2).all(|i| upstream_ready(&api, &fleet.name(i)).as_deref() == Some("True"))
    })
    .await;

    // The API server answers 503: the change waits in the outbox.
    api.set_fault(Fault::Status(503));
    fleet.handle.set(&victim, KubeletState::Down).unwrap();
    let status = c
        .wait_for("/v1/mirror", "a 503 recorded", |s| {
            s["backlog"].as_u64() >= Some(1)
                && s["lastError"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("503"))
        })
        .await;
    assert!(status["retries"].as_u64().unwrap() >= 1, "{status}");
    // Then it answers, but slower than --kube-api-timeout (2s).
    api.set_fault(Fault::Slow(Duration::from_secs(5)));
    c.wait_for("/v1/mirror", "a timeout recorded", |s| {
        s["lastError"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no answer within 2s"))
    })
    .await;
    assert_eq!(upstream_ready(&api, &victim).as_deref(), Some("True"));
    // Back to normal: the change arrives.
    api.set_fault(Fault::None);
    upstream("the victim Unknown upstream", || {
        upstream_ready(&api, &victim).as_deref() == Some("Unknown")
    })
    .await;
    c.wait_for("/v1/mirror", "an empty backlog", |s| s["backlog"] == 0)
        .await;
    assert!(c.stop().success());
    site.stop().await;
}
