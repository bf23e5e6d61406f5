//! Kubelets that misbehave on purpose cannot stall the site: the real binary
//! probing a fleet in which some kubelets answer `/healthz` with a chunked
//! body whose second chunk claims 2^64 - 1 bytes.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;
use nodekeeper_sim::KubeletState;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// "ok" in one chunk, then a chunk size near 2^64 and a few bytes.
const EVIL: &[u8] =
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\nffffffffffffffff\r\nabc";
const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

/// A kubelet on `addr` that answers `ok` until `evil` is set, then the evil
/// answer; after it, it closes the connection or (`hold`) keeps it open.
async fn hostile_kubelet(addr: SocketAddr, evil: Arc<AtomicBool>, hold: bool) {
    let listener = TcpListener::bind(addr).await.unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let evil = evil.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                while matches!(socket.read(&mut buf).await, Ok(n) if n > 0) {
                    if !evil.load(Ordering::SeqCst) {
                        let _ = socket.write_all(OK).await;
                        continue;
                    }
                    let _ = socket.write_all(EVIL).await;
                    if hold {
                        // Reads the next requests and never answers them.
                        while matches!(socket.read(&mut buf).await, Ok(n) if n > 0) {}
                    }
                    return;
                }
            });
        }
    });
}

fn ready_condition(node: &Value) -> Value {
    node["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_kubelet_is_a_failed_probe_and_every_other_node_goes_on() {
    let fleet = TestFleet::start(3, Ipv4Addr::new(127, 81, 8, 1)).await;
    let port = fleet.fleet.port();
    let evil = Arc::new(AtomicBool::new(false));
    let closing: SocketAddr = (Ipv4Addr::new(127, 81, 9, 1), port).into();
    let holding: SocketAddr = (Ipv4Addr::new(127, 81, 9, 2), port).into();
    hostile_kubelet(closing, evil.clone(), false).await;
    hostile_kubelet(holding, evil.clone(), true).await;

    let dir = tempfile::tempdir().unwrap();
    let mut entries: Vec<Value> = fleet
        .fleet
        .nodes()
        .iter()
        .map(|n| serde_json::json!({"name": n.name, "address": n.address.ip().to_string()}))
        .collect();
    entries
        .push(serde_json::json!({"name": "hostile-closing", "address": closing.ip().to_string()}));
    entries
        .push(serde_json::json!({"name": "hostile-holding", "address": holding.ip().to_string()}));
    let nodes = dir.path().join("nodes.json");
    std::fs::write(&nodes, serde_json::to_vec(&entries).unwrap()).unwrap();
    let c = Controller::start(&dir.path().join("db"), &fast_args(&nodes, port));
    let (a, b) = (fleet.name(0), fleet.name(1));
    for n in [&a, &b, &fleet.name(2), "hostile-closing", "hostile-holding"] {
        c.wait_ready(n, "True").await;
    }

    // From now on both hostile kubelets send the evil answer to every probe.
    evil.store(true, Ordering::SeqCst);
    fleet.handle.set(&a, KubeletState::Down).unwrap();
    fleet.handle.set(&b, KubeletState::Sick).unwrap();
    c.wait_ready(&b, "False").await;
    c.wait_ready(&a, "Unknown").await;
    fleet.handle.set(&a, KubeletState::Up).unwrap();
    fleet.handle.set(&b, KubeletState::Up).unwrap();
    c.wait_ready(&a, "True").await;
    c.wait_ready(&b, "True").await;

    // Each hostile node is a failed probe, recorded with its reason: one
    // closed the connection inside the chunk it lied about, the other held
    // it open and never finished its answer.
    for (node, reason) in [
        (
            "hostile-closing",
            "connection closed in the middle of the body",
        ),
        ("hostile-holding", "no answer within 500ms"),
    ] {
        c.wait_ready(node, "Unknown").await;
        let (_, v) = c.get(&format!("/api/v1/nodes/{node}")).await;
        let ready = ready_condition(&v);
        assert_eq!(ready["reason"], "NodeStatusUnknown", "{ready}");
        let message = ready["message"].as_str().unwrap();
        assert!(message.ends_with(reason), "{node}: {message}");
    }
    let (_, history) = c
        .get("/v1/history?node=hostile-holding&condition=Ready")
        .await;
    let last = history.as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (last["from"].as_str(), last["to"].as_str()),
        (Some("True"), Some("Unknown"))
    );

    let log = c.log_text();
    assert!(!log.contains("probe sweep failed"), "{log}");
    assert!(!log.contains("panicked"), "{log}");
    assert!(c.stop().success());
    fleet.stop().await;
}
