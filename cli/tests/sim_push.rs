//! Simulated kubelets that push (`sim --push`, `Fleet::start_pushing`)
//! against the real controller in push mode: Ready through their pushes,
//! silence, sickness, skewed clocks, and self-registration.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;

use common::*;
use nodekeeper_sim::KubeletState;
use serde_json::Value;

fn ready_condition(node: &Value) -> Value {
    node["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or(Value::Null)
}

/// The node's Ready changes in its history, as (to, reason).
async fn ready_changes(c: &Controller, node: &str) -> Vec<(String, String)> {
    let (_, history) = c
        .get(&format!("/v1/history?node={node}&condition=Ready"))
        .await;
    history
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "ConditionChanged")
        .map(|e| {
            (
                e["to"].as_str().unwrap_or_default().to_string(),
                e["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushing_kubelets_are_ready_and_their_states_show() {
    let site = TestSite::builder(3, Ipv4Addr::new(127, 101, 0, 1))
        .push_mode()
        .start()
        .await;
    let fleet = &site.fleet;
    let c = site.controller(&[]);
    // The nodes' clocks are five hours behind: it must change nothing.
    fleet.push_to(&c, |p| p.clock_skew = jiff::SignedDuration::from_hours(-5));
    let (steady, silent, sick) = (fleet.name(0), fleet.name(1), fleet.name(2));
    for name in [&steady, &silent, &sick] {
        c.wait_ready(name, "True").await;
    }
    // Each initialises its CSINode as a kubelet does at start, and is not
    // refused on the way (kubernetes pkg/volume/csi/csi_plugin.go:375-414).
    eventually("every simulated kubelet's CSINode initialised", || async {
        fleet.push_stats().csinodes == 3
    })
    .await;
    let (code, csinodes) = c.get("/apis/storage.k8s.io/v1/csinodes").await;
    assert_eq!(code, 200);
    assert_eq!(csinodes["items"].as_array().unwrap().len(), 3, "{csinodes}");
    let last_error = fleet.push_stats().last_error.unwrap_or_default();
    assert!(!last_error.contains("csinodes"), "{last_error}");
    assert_eq!(
        ready_changes(&c, &steady).await,
        [("True".to_string(), "KubeletReady".to_string())]
    );
    let (_, node) = c.get(&format!("/api/v1/nodes/{steady}")).await;
    assert!(
        node["status"]["nodeInfo"]["kubeletVersion"]
            .as_str()
            .unwrap()
            .starts_with("v1."),
        "{node}"
    );
    let beat: jiff::Timestamp = ready_condition(&node)["lastHeartbeatTime"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let behind = jiff::Timestamp::now().duration_since(beat).as_secs_f64() / 3600.0;
    assert!((4.9..5.1).contains(&behind), "{behind}h behind: {node}");

    // The Lease is created and renewed, in kubelet's shape.
    let lease_path =
        format!("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{steady}");
    let (code, lease) = c.get(&lease_path).await;
    assert_eq!(code, 200, "{lease}");
    assert_eq!(lease["spec"]["holderIdentity"], steady.as_str());
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 40);
    let first_renewal = lease["spec"]["renewTime"].clone();
    eventually("the Lease is renewed", || async {
        let (_, lease) = c.get(&lease_path).await;
        lease["spec"]["renewTime"] != first_renewal
    })
    .await;
    let metrics = c.text("/metrics").await;
    for via in ["Lease", "Status"] {
        assert!(
            metrics.contains(&format!("nodekeeper_heartbeats_total{{via=\"{via}\"}}")),
            "{metrics}"
        );
    }

    // A down kubelet pushes nothing: Unknown after the grace period.
    fleet.handle.set(&silent, KubeletState::Down).unwrap();
    c.wait_ready(&silent, "Unknown").await;
    let (_, node) = c.get(&format!("/api/v1/nodes/{silent}")).await;
    assert_eq!(ready_condition(&node)["reason"], "NodeStatusUnknown");
    // A sick one says so.
    fleet.handle.set(&sick, KubeletState::Sick).unwrap();
    c.wait_ready(&sick, "False").await;
    let (_, node) = c.get(&format!("/api/v1/nodes/{sick}")).await;
    assert_eq!(ready_condition(&node)["reason"], "KubeletNotReady");
    // Both come back with their next pushes.
    fleet.handle.set(&silent, KubeletState::Up).unwrap();
    fleet.handle.set(&sick, KubeletState::Up).unwrap();
    c.wait_ready(&silent, "True").await;
    c.wait_ready(&sick, "True").await;
    assert_eq!(
        ready_changes(&c, &sick).await,
        [
            ("True".to_string(), "KubeletReady".to_string()),
            ("False".to_string(), "KubeletNotReady".to_string()),
            ("True".to_string(), "KubeletReady".to_string()),
        ]
    );

    // The steady node, whose clock is hours off, never changed.
    assert_eq!(ready_changes(&c, &steady).await.len(), 1);
    let stats = fleet.push_stats();
    assert_eq!(stats.failed, 0, "{stats:?}");
    assert_eq!(stats.registrations, 0, "{stats:?}");
    assert!(stats.leases > 0 && stats.statuses > 0, "{stats:?}");
    assert!(stats.sent >= stats.leases + stats.statuses, "{stats:?}");
    assert!(c.stop().success());
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_nodes_register_themselves_when_asked_and_allowed() {
    let site = TestSite::builder(2, Ipv4Addr::new(127, 102, 0, 1))
        .push_mode()
        .listing_first(1)
        .start()
        .await;
    let fleet = &site.fleet;
    let c = site.controller_with(&["--allow-node-registration"]);
    fleet.push_to(&c, |p| p.register = true);
    let newcomer = fleet.name(1);
    c.wait_ready(&fleet.name(0), "True").await;
    c.wait_ready(&newcomer, "True").await;
    // Registered, then the four conditions a kubelet reports, Ready last;
    // then its CSINode, created once its node exists.
    eventually("the newcomer's CSINode exists", || async {
        let path = format!("/apis/storage.k8s.io/v1/csinodes/{newcomer}");
        c.get(&path).await.0 == 200
    })
    .await;
    let (_, history) = c.get(&format!("/v1/history?node={newcomer}")).await;
    let kinds: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "Registered",
            "ConditionChanged",
            "ConditionChanged",
            "ConditionChanged",
            "ConditionChanged",
            "ObjectChanged"
        ],
        "{history}"
    );
    assert_eq!(history[5]["resource"], "csinodes.storage.k8s.io");
    assert_eq!(history[0]["record"]["source"], "kubelet");
    assert_eq!(history[4]["condition"], "Ready");
    assert_eq!(history[4]["reason"], "KubeletReady");
    let (_, node) = c.get(&format!("/api/v1/nodes/{newcomer}")).await;
    let address = fleet.fleet.nodes()[1].address.ip().to_string();
    assert_eq!(
        node["status"]["addresses"][0]["address"],
        address.as_str(),
        "{node}"
    );
    // Its Lease follows once it is registered.
    eventually("the newcomer's Lease exists", || async {
        let (code, _) = c
            .get(&format!(
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{newcomer}"
            ))
            .await;
        code == 200
    })
    .await;
    let stats = fleet.push_stats();
    assert_eq!(stats.registrations, 1);
    // Its Lease was not sent before its node existed: a kubelet's lease
    // controller reads the node first and creates nothing while it is
    // missing (kubernetes `pkg/kubelet/util/nodelease.go:32-55`,
    // `component-helpers/apimachinery/lease/controller.go:158-181`), so
    // nothing it sent was refused.
    assert_eq!(
        (stats.refused, stats.last_error.as_deref()),
        (0, None),
        "{stats:?}"
    );
    assert!(c.stop().success());
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_nodes_are_reported_not_registered_without_register() {
    let site = TestSite::builder(2, Ipv4Addr::new(127, 103, 0, 1))
        .push_mode()
        .listing_first(1)
        .start()
        .await;
    let fleet = &site.fleet;
    let c = site.controller_with(&["--allow-node-registration"]);
    fleet.push_to(&c, |_| {});
    let stranger = fleet.name(1);
    c.wait_ready(&fleet.name(0), "True").await;
    eventually("the stranger's 404 is counted", || async {
        let stats = fleet.push_stats();
        stats.failed > 0
            && stats
                .last_error
                .is_some_and(|e| e.contains(&stranger) && e.contains("404"))
    })
    .await;
    // It keeps trying, and is never registered.
    let failed = fleet.push_stats().failed;
    eventually("the stranger keeps trying", || async {
        fleet.push_stats().failed > failed
    })
    .await;
    let (code, _) = c.get(&format!("/api/v1/nodes/{stranger}")).await;
    assert_eq!(code, 404);
    assert_eq!(fleet.push_stats().registrations, 0);
    assert!(c.stop().success());
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_that_forbids_registration_is_reported() {
    let site = TestSite::builder(2, Ipv4Addr::new(127, 104, 0, 1))
        .push_mode()
        .listing_first(1)
        .start()
        .await;
    let fleet = &site.fleet;
    let c = site.controller(&[]);
    fleet.push_to(&c, |p| p.register = true);
    eventually("the refusal is counted", || async {
        fleet.push_stats().last_error.is_some_and(|e| {
            e.starts_with("POST /api/v1/nodes: 403") && e.contains("--allow-node-registration")
        })
    })
    .await;
    let (code, _) = c.get(&format!("/api/v1/nodes/{}", fleet.name(1))).await;
    assert_eq!(code, 404);
    assert!(c.stop().success());
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_push_registers_a_skewed_fleet_from_the_command_line() {
    let site = TestSite::unlisted().start();
    let c = site.controller_with(&["--allow-node-registration"]);
    let token = site.path().join("token");
    std::fs::write(&token, "t0k3n\n").unwrap();
    let sim = SimProcess::start(
        site.path(),
        &[
            "--nodes",
            "2",
            "--base-ip",
            "127.105.0.1",
            "--prefix",
            "cli-",
            "--push",
            &c.url,
            "--register",
            "--clock-skew",
            "-5h",
            "--lease-renew-interval",
            "200ms",
            "--status-update-interval",
            "200ms",
            "--push-token-file",
            token.to_str().unwrap(),
        ],
    );
    c.wait_ready("cli-00000", "True").await;
    c.wait_ready("cli-00001", "True").await;
    eventually("the control endpoint counts both registrations", || async {
        let stats = sim.get("/stats").await;
        stats["pushes"]["registrations"] == 2 && stats["pushes"]["leases"].as_u64() > Some(0)
    })
    .await;
    let stats = sim.get("/stats").await;
    assert_eq!(stats["nodes"], 2, "{stats}");
    assert_eq!(stats["states"]["up"], 2, "{stats}");
    // A sick node, set through the control endpoint, reports it.
    let (code, out, err) = cli(
        &c.db,
        &["sim", "set", "cli-00001", "sick", "--control", &sim.control],
    );
    assert_eq!(code, 0, "{out}{err}");
    c.wait_ready("cli-00001", "False").await;
    assert!(c.stop().success());
    drop(sim);
}

#[test]
fn bad_push_flags_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let (code, _, err) = cli(&db, &["sim", "--clock-skew", "-5h"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--push"), "{err}");
    let (code, _, err) = cli(&db, &["sim", "--push", "ftp://127.0.0.1:1"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--push \"ftp://127.0.0.1:1\""), "{err}");
    let (code, _, err) = cli(
        &db,
        &[
            "sim",
            "--push",
            "http://127.0.0.1:1",
            "--push-token-file",
            "/nonexistent/token",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--push-token-file"), "{err}");
    let (code, _, err) = cli(
        &db,
        &["sim", "--push", "http://127.0.0.1:1", "--clock-skew", "5x"],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--clock-skew"), "{err}");
}

/// `sim --bootstrap-token`: a fleet from the command line joins as kubelets
/// with `--bootstrap-kubeconfig` do (kubernetes
/// `pkg/kubelet/certificate/bootstrap/bootstrap.go` `LoadClientCert`): each
/// node's CSR, approved for the names the site lists and signed, then its
/// certificate for every call, against the real binary with TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::disallowed_methods)] // set-up writes small files
async fn sim_joins_a_fleet_by_bootstrap_token_from_the_command_line() {
    const OPERATOR: &str = "operator-secret";
    let site = TestSite::named(&["bs-00000", "bs-00001"], Ipv4Addr::new(127, 106, 0, 1)).start();
    let ca = Ca::new();
    let c = site
        .run()
        .tls()
        .tokens(&format!("{OPERATOR}\n"))
        .client_ca(&ca.pem)
        .cluster_signing(&ca)
        .flags(&["--enable-bootstrap-token-auth"])
        .start();
    let server_ca = site.path().join("server-ca.pem");
    std::fs::write(&server_ca, c.server_pem.as_deref().unwrap()).unwrap();
    let token = cli_ok(&site.db, &["--token", OPERATOR, "token", "create"])
        .trim()
        .to_string();
    let sim = SimProcess::start(
        site.path(),
        &[
            "--nodes",
            "2",
            "--base-ip",
            "127.106.0.1",
            "--prefix",
            "bs-",
            "--push",
            &c.url,
            "--push-ca-file",
            server_ca.to_str().unwrap(),
            "--bootstrap-token",
            &token,
            "--lease-renew-interval",
            "200ms",
            "--status-update-interval",
            "200ms",
        ],
    );
    c.wait_ready("bs-00000", "True").await;
    c.wait_ready("bs-00001", "True").await;
    eventually("both nodes joined and renew their Leases", || async {
        let stats = sim.get("/stats").await;
        stats["pushes"]["bootstraps"] == 2 && stats["pushes"]["leases"].as_u64() > Some(2)
    })
    .await;
    let stats = sim.get("/stats").await;
    assert_eq!(stats["pushes"]["refused"], 0, "{stats}");
    assert_eq!(stats["pushes"]["callErrors"], 0, "{stats}");
    // Each certificate issued is in its node's history, asked for by the
    // bootstrap token's user; the node's own writes authenticate with it.
    let token_id = token.split('.').next().unwrap();
    for name in ["bs-00000", "bs-00001"] {
        let event = c.wait_event(name, "CertificateIssued").await;
        assert_eq!(
            event["requestedBy"],
            format!("system:bootstrap:{token_id}"),
            "{event}"
        );
    }
    drop(sim);
    drop(c);

    // Over plain http, or with another credential: a usage error.
    let (code, _, err) = cli(
        &site.db,
        &[
            "sim",
            "--push",
            "http://127.0.0.1:1",
            "--bootstrap-token",
            &token,
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--bootstrap-token is for https"), "{err}");
    let (code, _, err) = cli(
        &site.db,
        &[
            "sim",
            "--push",
            "https://127.0.0.1:1",
            "--bootstrap-token",
            &token,
            "--push-token-file",
            "/dev/null",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
}
