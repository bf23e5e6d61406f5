//! A simulated site whose kubelets make every call of docs/kubelet-api.md
//! a v1.33 kubelet makes (`PushConfig::kubelet_calls` = `All`, `sim
//! --kubelet-calls all`: registration, Lease, status, CSINode, the
//! reflectors' lists and watches, start events and a mirror pod), against
//! the real binary with TLS and `--client-ca-file`: three kubelets hold a
//! client certificate from the site's CA, one of them registering itself,
//! and one joins by bootstrap token and CSR
//! (`pkg/kubelet/certificate/bootstrap/bootstrap.go` `LoadClientCert`,
//! played by [`nodekeeper_sim::bootstrap::load_client_cert`]). Every kubelet
//! reaches Ready, every kind of call is answered as a kubelet wants, and no
//! answer is one a kubelet would log or retry (`PushStats::call_errors`).
// Set-up writes small files before the controller starts.
#![allow(clippy::disallowed_methods)]

mod common;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use common::{cli_ok, Ca, TestSite, DEADLINE};
use nodekeeper_sim::bootstrap::load_client_cert;
use nodekeeper_sim::push::{ClientCerts, KubeletCalls, NodeCert};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

const OPERATOR: &str = "operator-secret";

/// The call kinds of `PushStats::calls` a kubelet makes once each at least.
const CALL_KINDS: [&str; 13] = [
    "nodes list",
    "nodes watch",
    "services list",
    "services watch",
    "pods list",
    "pods watch",
    "csidrivers list",
    "csidrivers watch",
    "runtimeclasses list",
    "runtimeclasses watch",
    "event",
    "mirror pod",
    "mirror pod status",
];

/// The events each kubelet posts at start (docs/kubelet-api.md 2.5).
const START_EVENTS: [&str; 6] = [
    "Starting",
    "NodeHasSufficientMemory",
    "NodeHasNoDiskPressure",
    "NodeHasSufficientPID",
    "NodeAllocatableEnforced",
    "NodeReady",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_of_kubelets_making_every_call_reaches_ready_without_an_error() {
    // Nodes 0-2 are listed (2 joins by bootstrap token: the listed names'
    // CSRs are approved); node 3 is not, and registers itself.
    let site = TestSite::builder(4, Ipv4Addr::new(127, 172, 0, 1))
        .push_mode()
        .listing_first(3)
        .start()
        .await;
    let ca = Arc::new(Ca::new());
    let c = site
        .run()
        .tls()
        .tokens(&format!("{OPERATOR}\n"))
        .client_ca(&ca.pem)
        .cluster_signing(&ca)
        .flags(&["--allow-node-registration", "--enable-bootstrap-token-auth"])
        .start();
    let names: Vec<String> = (0..4).map(|i| site.fleet.name(i)).collect();

    // Node 2 joins: a bootstrap token made by the operator, a CSR, the
    // certificate it is issued.
    let token = cli_ok(&site.db, &["--token", OPERATOR, "token", "create"])
        .trim()
        .to_string();
    let joined = load_client_cert(
        &c.client(),
        &c.url,
        Some(&token),
        &names[2],
        Duration::from_secs(30),
        |_| {},
    )
    .await
    .unwrap_or_else(|e| panic!("{e}: {}", c.log_text()));
    let bootstrapped: NodeCert = (
        CertificateDer::pem_slice_iter(joined.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap(),
        PrivateKeyDer::from_pem_slice(joined.key_pem.as_bytes()).unwrap(),
    );
    let (issuer, joiner) = (ca.clone(), names[2].clone());
    site.fleet.push_to(&c, |p| {
        p.register = true;
        p.kubelet_calls = KubeletCalls::All;
        p.client_certs = Some(ClientCerts(Arc::new(move |name: &str| {
            // Read by each of the node's connections.
            if name == joiner {
                return Ok((bootstrapped.0.clone(), bootstrapped.1.clone_key()));
            }
            Ok(issuer.node_cert(name))
        })));
    });

    for name in &names {
        c.wait_ready(name, "True").await;
    }
    // Every kind of call answered, by every node where a node makes it once.
    let started = tokio::time::Instant::now();
    let stats = loop {
        let stats = site.fleet.push_stats();
        let done = CALL_KINDS.iter().all(|kind| {
            let want = if *kind == "event" {
                names.len() * START_EVENTS.len()
            } else {
                names.len()
            };
            stats.calls.get(*kind).copied().unwrap_or(0) >= want as u64
        });
        if done && stats.csinodes >= 4 && stats.leases >= 8 {
            break stats;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "not every call was answered: {stats:?}\n{}",
            c.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(stats.registrations, 1, "{stats:?}");
    assert_eq!(
        (stats.call_errors, stats.last_call_error.as_deref()),
        (0, None),
        "{stats:?}"
    );
    let kinds: Vec<&str> = stats.calls.keys().map(String::as_str).collect();
    let mut want: Vec<&str> = CALL_KINDS.to_vec();
    want.sort_unstable();
    assert_eq!(kinds, want, "{stats:?}");

    // The events are the nodes', in kubectl's list.
    let (code, events) = c.get("/api/v1/events").await;
    assert_eq!(code, 200, "{events}");
    let mut reasons: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for event in events["items"].as_array().unwrap() {
        if event["source"]["component"] == "kubelet" {
            reasons
                .entry(event["involvedObject"]["name"].as_str().unwrap().to_owned())
                .or_default()
                .push(event["reason"].as_str().unwrap().to_owned());
        }
    }
    for name in &names {
        let got = reasons.get(name).cloned().unwrap_or_default();
        for reason in START_EVENTS {
            assert!(got.iter().any(|r| r == reason), "{name}: {got:?}\n{events}");
        }
    }
    // Each Lease is owned by its node (pkg/kubelet/util/nodelease.go), so
    // that a kubelet stops reading its node before each renewal.
    for name in &names {
        let (_, node) = c.get(&format!("/api/v1/nodes/{name}")).await;
        let (code, lease) = c
            .get(&format!(
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
            ))
            .await;
        assert_eq!(code, 200, "{lease}");
        assert!(node["metadata"]["uid"].is_string(), "{node}");
        assert_eq!(
            lease["metadata"]["ownerReferences"][0]["uid"], node["metadata"]["uid"],
            "{lease}"
        );
    }
    let (code, pods) = c.get("/api/v1/pods").await;
    assert_eq!(code, 200, "{pods}");
    // Each kubelet's mirror pod is listed with the site's pods, Running as
    // its status patch says.
    let mut listed: Vec<(String, String, String)> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["metadata"]["name"].as_str().unwrap().to_owned(),
                p["spec"]["nodeName"].as_str().unwrap().to_owned(),
                p["status"]["phase"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    listed.sort();
    let want: Vec<(String, String, String)> = names
        .iter()
        .map(|n| (format!("node-agent-{n}"), n.clone(), "Running".to_owned()))
        .collect();
    assert_eq!(listed, want, "{pods}");

    // The watches held open stop with the fleet.
    let dir = tokio::time::timeout(DEADLINE, site.stop_fleet())
        .await
        .expect("the simulated kubelets stop, their watches with them");
    drop(c);
    drop(dir);
}

/// A site of more kubelets than the base watch budget (100) allows at five
/// watches each: without `--max-watches` the budget grows by five for each
/// registered node, so every kubelet's reflectors stream and none is told
/// 429; the watches are counted in the in-flight gauge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_budget_grows_with_the_site() {
    nodekeeper::config::raise_open_file_limit();
    const NODES: usize = 24;
    let site = TestSite::builder(NODES, Ipv4Addr::new(127, 173, 0, 1))
        .push_mode()
        .start()
        .await;
    let c = site.controller(&[]);
    site.fleet.push_to(&c, |p| {
        p.kubelet_calls = KubeletCalls::All;
    });
    let watches = NODES * nodekeeper::server::ApiLimits::WATCHES_PER_NODE;
    assert!(watches > nodekeeper::server::ApiLimits::DEFAULT_MAX_WATCHES);
    let started = tokio::time::Instant::now();
    loop {
        let metrics = c.text("/metrics").await;
        let streaming = metrics
            .lines()
            .find(|l| l.starts_with("nodekeeper_http_inflight_requests{kind=\"Watch\"}"))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0);
        let stats = site.fleet.push_stats();
        if streaming == watches {
            assert_eq!(
                (stats.call_errors, stats.last_call_error.as_deref()),
                (0, None),
                "{stats:?}"
            );
            assert!(
                metrics.contains(
                    "nodekeeper_http_rejected_requests_total{kind=\"Watch\",reason=\"TooManyRequests\"} 0\n"
                ),
                "{metrics}"
            );
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "{streaming} of {watches} watches streaming: {stats:?}\n{}",
            c.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let dir = tokio::time::timeout(DEADLINE, site.stop_fleet())
        .await
        .expect("the simulated kubelets stop, their watches with them");
    drop(c);
    drop(dir);
}
